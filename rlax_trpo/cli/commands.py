"""The commands: `train` (the default), `eval`, `configs` and `report`, each from its
parsed options to its exit status. JAX is imported only once the CPU is set up
(`rlax_trpo.platform.setup_cpu`), inside each command."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rlax_trpo.cli.parsers import Parser, build_configs_parser, build_eval_parser, build_parser
from rlax_trpo.errors import UsageError, option_names
from rlax_trpo.experiment import compile_cache, peers, runlog


def train_main(argv: list[str], prog: str = "rlax-trpo train", process: bool = False) -> int:
    """`train [options] [key=value ...]`; returns the exit status (0, 1 diverged, 128+signal
    interrupted). `process`: the command is the whole process (not a call from Python)."""
    args = build_parser(prog).parse_intermixed_args(argv)
    flags = {
        "--devices": args.devices,
        "--num-processes": args.num_processes,
        "--log-every": args.log_every,
        "--peer-timeout": args.peer_timeout,
        "--startup-timeout": args.startup_timeout,
    }
    for flag, value in flags.items():
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be a positive integer (got {value})")
    if args.seed is not None and not 0 <= args.seed <= 2**32 - 2:  # JAX keeps 32 bits
        raise UsageError(f"--seed: must be an integer from 0 to 4294967294 (got {args.seed})")
    multi_host = peers.check_args(args)
    if multi_host and not peers.in_supervised_child():  # the runtime's aborts become one line
        return peers.supervise(argv, prog, args.process_id, args.resume or args.out)
    with runlog.quiet_libraries(not args.verbose, to_the_end=process):  # in <run>/run.log
        with option_names():  # messages name --seeds, --resume, not run()'s keywords
            return _train(args, prog, multi_host)


def _train(args: argparse.Namespace, prog: str, multi_host: bool) -> int:
    """The run the command line asks for, and its outcome printed; the exit status."""
    from rlax_trpo.platform import setup_cpu

    # Before JAX starts (gymnax starts it at import): one CPU device per core, or --devices.
    compile_cache.setup_compile_cache(not args.no_compile_cache)  # and before the first compilation
    setup_cpu(None if multi_host else args.devices)
    if multi_host:
        peers.join(args)
    from rlax_trpo.experiment import driver

    config, sweep = _train_config(args)
    wandb = None
    if args.wandb:
        wandb = {"project": args.wandb_project, "name": args.wandb_name}
    result = driver.run(
        config,
        seeds=args.seeds,
        seed=args.seed,
        sweep=sweep,
        out=args.out,
        chunk_iterations=args.chunk_iterations,
        resume=args.resume,
        devices=args.devices,
        shard=args.shard,
        progress=not args.no_progress,
        tensorboard=args.tensorboard,
        wandb=wandb,
        log_every=args.log_every,
        keep_checkpoints=args.keep_checkpoints,
        single_call=args.single_call,
        hard_stop=True,
    )
    return _report(result, prog)


def _train_config(args: argparse.Namespace) -> tuple[Any, Any]:
    """The run's config (None to take the resumed run's) and sweep, from the command line."""
    from rlax_trpo.config.configuration import load_config
    from rlax_trpo.config.sweep import parse_sweeps
    from rlax_trpo.experiment.resume import saved_config  # any surviving copy

    config = None
    if args.resume is not None and not (args.resume / "checkpoint").is_dir():
        raise UsageError(f"--resume: {str(args.resume)!r} is not a run folder")
    if args.resume is None or args.config is not None or args.overrides or args.imports:
        base = None  # with --resume alone, overrides are checked against the saved config
        if args.resume is not None and args.config is None:
            base = saved_config(args.resume).config.to_dict()
        config = load_config(args.config, args.overrides, args.imports, base)
    if not args.sweep:
        return config, None
    base = config if config is not None else saved_config(args.resume).config
    return config, parse_sweeps(args.sweep, base, args.overrides)


def _report(result, prog: str = "rlax-trpo train") -> int:
    import shlex

    import jax

    from rlax_trpo.report.run_files import format_outcome

    # How to resume: the command the user ran (a checkout's script runs under python).
    command = f"python {prog}" if prog.endswith(".py") else prog
    out, err, code = format_outcome(result, f"{command} --resume {shlex.quote(str(result.out))}")
    if jax.process_index() == 0:  # in a multi-process run, process 0 speaks for all
        print(out, end="")
        print(err, end="", file=sys.stderr)
    return code


def eval_main(argv: list[str], prog: str = "rlax-trpo eval") -> int:
    """`eval --run DIR [--episodes N] [--gif [PATH]]`; returns the exit status."""
    from rlax_trpo.platform import setup_cpu

    args = build_eval_parser(prog).parse_args(argv)
    compile_cache.setup_compile_cache(not args.no_compile_cache)
    setup_cpu(1)  # evaluation runs on one device
    from rlax_trpo.experiment.saved import eval_command

    return eval_command(args)


def configs_main(argv: list[str], prog: str = "rlax-trpo configs") -> int:
    """`configs`: the bundled configurations, one per line with algorithm, environment,
    budget and description; `configs --show NAME [key=value ...]`: one configuration
    resolved, as YAML; `configs --envs`: the valid environment names."""
    args = build_configs_parser(prog).parse_intermixed_args(argv)
    if args.envs:
        if args.show is not None or args.overrides:
            raise UsageError("configs: --envs lists environments; it takes no --show or overrides")
        from rlax_trpo.config.plugins import load_plugins
        from rlax_trpo.envs.registry import env_listing

        load_plugins(args.imports)  # a plugin's own environments are listed too
        print(env_listing(), end="")
        return 0
    if args.show is None:
        if args.overrides or args.imports:
            raise UsageError("configs: overrides and --import need --show NAME")
        from rlax_trpo.config.defaults import bundled_config_table

        print(bundled_config_table(), end="")
        return 0
    from rlax_trpo.platform import setup_cpu

    setup_cpu(1)
    from rlax_trpo.config.configuration import describe_sources

    print(describe_sources(args.show, args.overrides, args.imports), end="")
    return 0


def report_main(argv: list[str], prog: str = "rlax-trpo report") -> int:
    """`report PATH [PATH ...] [options]`; the exit status (2: bad input, or no rliable)."""
    from rlax_trpo.report.command import build_report_parser, report_command

    args = build_report_parser(prog, Parser).parse_intermixed_args(argv)
    return report_command(args, prog)


def tiny_lm_main(argv: list[str], prog: str = "rlax-trpo tiny-lm") -> int:
    """`tiny-lm --out DIR [--steps N] ...`: a small pretrained model in the Hugging Face
    layout, trained here on word problems (`rlax_trpo.experiment.tiny_lm`)."""
    import json

    from rlax_trpo.cli.parsers import build_tiny_lm_parser

    args = build_tiny_lm_parser(prog).parse_args(argv)
    compile_cache.setup_compile_cache(not args.no_compile_cache)
    from rlax_trpo.platform import setup_cpu

    setup_cpu(1)
    from rlax_trpo.experiment.tiny_lm import make_tiny_lm

    made = make_tiny_lm(
        args.out,
        steps=args.steps,
        seed=args.seed,
        width=args.width,
        layers=args.layers,
        vocab_size=args.vocab_size,
        kinds=tuple(args.kinds) if args.kinds else None,
    )
    print(json.dumps(made, indent=2))
    return 0
