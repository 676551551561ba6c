#!/usr/bin/env python
"""Train policy-optimisation agents: `python train.py [--config PATH] [--seeds N] [key=value ...]`.

With no arguments it trains PPO on CartPole-v1 (the embedded default, about a minute on a
2-core CPU). Every seed runs inside one compiled, vmapped call. The run folder gets
`config.yaml`, `metrics.csv`, `summary.json`, `learning_curve.png` and `checkpoint/`.

Bad input prints one line naming the problem and exits with status 2, writing nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

# Embedded default (the same as configs/ppo_cartpole.yaml): PPO on CartPole-v1 with RL Zoo's
# tuned settings at lr 5e-4; 8/8 seeds end at 500 by 200k steps.
DEFAULT_CONFIG: dict[str, Any] = {
    "algorithm": "ppo",
    "env": "CartPole-v1",
    "num_envs": 8,
    "num_steps": 32,
    "total_env_steps": 200_000,
    "num_epochs": 20,
    "num_minibatches": 1,
    "anneal_lr": True,
    "advantage": "gae",
    "hidden_sizes": [64, 64],
    "activation": "tanh",
    "hp": {
        "learning_rate": 5e-4,
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "clip_eps": 0.2,
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
    },
}


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit status 2
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="train.py",
        description="Train VPG/NPG/TRPO/PPO/GRPO agents: seeds x hyperparameter settings in "
        "one compiled call, sharded over devices, in resumable chunks. "
        "`train.py eval --run DIR` evaluates a finished run.",
        epilog="Overrides use the YAML keys: num_envs=64 hp.learning_rate=1e-3 env=Acrobot-v1",
    )
    p.add_argument(
        "--config", type=Path, help="YAML file (see configs/); default: embedded PPO CartPole-v1"
    )
    p.add_argument("--seeds", type=int, default=None, help="number of seeds, vmapped (default 1)")
    p.add_argument("--seed", type=int, default=None, help="base PRNG seed (default 0)")
    p.add_argument("--out", type=Path, help="run folder (default runs/<algo>_<env>_<time>)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="hp.NAME=V1,V2,...",
        help="sweep a hyperparameter (repeat for a grid); the grid x seeds runs "
        "as one vmapped call",
    )
    p.add_argument(
        "--chunk-iterations",
        type=int,
        default=None,
        metavar="K",
        help="run in jitted chunks of K iterations with a checkpoint after each "
        "(SIGINT/SIGTERM stop cleanly after the current chunk)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the run in DIR from its last checkpoint",
    )
    p.add_argument(
        "--devices",
        type=int,
        default=None,
        metavar="N",
        help="devices to shard over (default: as many as divide the split axis)",
    )
    p.add_argument(
        "--shard",
        choices=("population", "envs"),
        default="population",
        help="split the population (seeds x settings, default) or the environment "
        "axis of each run over the devices",
    )
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard event files to <run>/tensorboard (needs tensorboardX)",
    )
    p.add_argument(
        "--coordinator-address",
        default=None,
        metavar="HOST:PORT",
        help="multi-host: address of process 0 (jax.distributed.initialize)",
    )
    p.add_argument("--num-processes", type=int, default=None, help="multi-host: processes")
    p.add_argument("--process-id", type=int, default=None, help="multi-host: this process")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return p


def prepare(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse and validate everything; raises UsageError/ConfigError before any write.

    Sets `args.sweep_spec` (a `Sweep`), and for `--resume` fills seeds, seed, sweep and the
    config from the checkpoint (explicit flags must agree with it).
    """
    from rlax_trpo.config import merge_overrides, parse_overrides, read_yaml
    from rlax_trpo.sweep import Sweep, parse_sweeps

    args = build_parser().parse_args(argv)
    for flag, value in (
        ("--seeds", args.seeds),
        ("--chunk-iterations", args.chunk_iterations),
        ("--devices", args.devices),
        ("--num-processes", args.num_processes),
    ):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be a positive integer (got {value})")
    if args.resume is not None:
        return args, _prepare_resume(args)
    args.seeds = 1 if args.seeds is None else args.seeds
    args.seed = 0 if args.seed is None else args.seed
    raw = read_yaml(args.config) if args.config else dict(DEFAULT_CONFIG)
    raw = merge_overrides(raw, parse_overrides(args.overrides))
    if raw.get("algorithm") == "grpo_lm":
        for flag, used in (
            ("--sweep", args.sweep),
            ("--chunk-iterations", args.chunk_iterations),
            ("--tensorboard", args.tensorboard),
            ("--devices", args.devices),
        ):
            if used:
                raise UsageError(
                    f"{flag}: not supported for algorithm grpo_lm (it has its own "
                    f"driver, rlax_trpo.lm.run)"
                )
    hp = raw.get("hp") if isinstance(raw.get("hp"), dict) else {}
    args.sweep_spec = parse_sweeps(args.sweep, hp) if args.sweep else Sweep((), ())
    if (
        args.out is not None
        and args.out.exists()
        and (not args.out.is_dir() or any(args.out.iterdir()))
    ):
        raise UsageError(f"--out: {str(args.out)!r} exists and is not an empty directory")
    return args, raw


def _prepare_resume(args: argparse.Namespace) -> dict[str, Any]:
    """Read (never write) the checkpoint of `--resume DIR`; check explicit flags against it."""
    from rlax_trpo import checkpoint
    from rlax_trpo.config import merge_overrides, parse_overrides, read_yaml
    from rlax_trpo.sweep import Sweep, parse_sweeps

    run_dir = args.resume
    if not run_dir.is_dir():
        raise UsageError(f"--resume: {str(run_dir)!r} is not a run folder")
    if args.out is not None:
        raise UsageError("--out: a resumed run continues in its own folder; drop --out")
    ckpt = run_dir / "checkpoint"
    meta = checkpoint.read_meta(ckpt)  # verifies the latest step's checksums
    config = checkpoint.load_config(ckpt)
    raw = config.to_dict()
    if config.to_dict() != meta.get("config"):
        raise checkpoint.CheckpointError(
            f"checkpoint {str(ckpt)!r} does not match: its "
            f"config.yaml differs from the config of its state"
        )
    saved = {"seeds": meta["seeds"], "seed": meta["seed"], "sweep": Sweep.from_dict(meta["sweep"])}
    given = {
        "seeds": args.seeds,
        "seed": args.seed,
        "sweep": parse_sweeps(args.sweep, raw["hp"]) if args.sweep else None,
    }
    for name, value in given.items():
        if value is not None and value != saved[name]:
            shown = value.to_dict() if name == "sweep" else value
            was = saved[name].to_dict() if name == "sweep" else saved[name]
            raise checkpoint.CheckpointError(
                f"--resume: the checkpoint in {str(run_dir)!r} was made with {name}={was}, "
                f"not {shown}"
            )
    if args.config is not None or args.overrides:
        wanted = read_yaml(args.config) if args.config else dict(raw)
        wanted = merge_overrides(wanted, parse_overrides(args.overrides))
        from rlax_trpo.config import Config

        if Config.create(**wanted).to_dict() != raw:
            raise checkpoint.CheckpointError(
                f"--resume: the given config differs from the one in {str(ckpt)!r}; resume "
                f"with --resume alone"
            )
    if meta["iterations_done"] >= meta["num_iterations"] and (run_dir / "summary.json").exists():
        raise UsageError(f"--resume: the run in {str(run_dir)!r} is already complete")
    args.seeds, args.seed, args.sweep_spec = saved["seeds"], saved["seed"], saved["sweep"]
    if args.chunk_iterations is None:
        args.chunk_iterations = meta.get("chunk_iterations")
    args.out = run_dir
    return raw


class _StopRequest:
    """SIGINT/SIGTERM handlers that only set a flag, checked between chunks.

    The first signal asks the run to stop after the current chunk and its checkpoint; the
    default handlers are restored at once, so a second signal stops the process immediately.
    """

    def __init__(self):
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        name = signal.Signals(signum).name
        print(
            f"\n{name} received: stopping after the current chunk and its checkpoint "
            f"(send it again to stop now)",
            file=sys.stderr,
            flush=True,
        )

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def run_control(args: argparse.Namespace, raw: dict[str, Any]) -> int:
    """Train the population; returns the exit status (0, 1 diverged, 128+signal stopped)."""
    chunked = args.chunk_iterations is not None
    # Chunked runs take SIGINT/SIGTERM from the start (compilation included) and honour
    # them after the next checkpoint.
    with _StopRequest() if chunked else contextlib.nullcontext(_StopRequest()) as stop:
        return _run_control(args, raw, stop)


def _run_control(args: argparse.Namespace, raw: dict[str, Any], stop: _StopRequest) -> int:
    import jax
    import numpy as np

    from rlax_trpo import checkpoint, parallel
    from rlax_trpo import metrics as mlib
    from rlax_trpo import sweep as sweeplib
    from rlax_trpo.config import Config
    from rlax_trpo.envs import check_env_name
    from rlax_trpo.evaluate import make_evaluate
    from rlax_trpo.training import make_trainer

    config = Config.create(**raw)
    check_env_name(config.env)
    sweep = args.sweep_spec
    settings = sweep.settings or [{}]
    seeds = args.seeds
    population = len(settings) * seeds
    num_devices = parallel.choose_num_devices(args.devices, population, config.num_envs, args.shard)
    mesh = parallel.make_mesh(num_devices, args.shard)
    total = config.num_iterations
    chunked = args.chunk_iterations is not None
    chunk = min(args.chunk_iterations or total, total)
    resume = args.resume is not None
    labels = [sweeplib.setting_label(s) for s in settings]
    tb = None
    if args.tensorboard:
        try:
            import tensorboardX  # noqa: F401
        except ImportError:
            raise UsageError(
                "--tensorboard: needs tensorboardX (pip install 'rlax_trpo[tensorboard]')"
            ) from None
    out = args.out or Path("runs") / (
        f"{config.algorithm}_{config.env}_{dt.datetime.now():%Y%m%d-%H%M%S}"
    )
    bar = mlib.ProgressBar(
        total,
        config.batch_size,
        enabled=not args.no_progress and jax.process_index() == 0,
        population=population,
    )
    trainer = make_trainer(config, progress=bar)  # raises ConfigError for unknown algorithms
    evaluate = make_evaluate(config, trainer.env, trainer.networks, config.eval_episodes)

    # Population inputs, placed on the mesh: member m = setting m // seeds, seed m % seeds.
    pop_sharding = parallel.population_sharding(mesh)
    hps = parallel.put(sweeplib.population_hparams(config.hp, sweep, seeds), pop_sharding)
    key_data = parallel.put(
        sweeplib.population_key_data(args.seed, seeds, len(settings)), pop_sharding
    )

    def init_population(kd, hp):
        return jax.vmap(trainer.init)(jax.random.wrap_key_data(kd), hp)

    abstract = jax.eval_shape(init_population, key_data, hps)
    shardings = parallel.state_shardings(abstract, mesh)

    ckpt_dir = out / "checkpoint"
    meta: dict[str, Any] = {}
    start, history = 0, []
    if resume:
        state, metrics_so_far, meta = checkpoint.restore_step(ckpt_dir, abstract)
        state = parallel.put(state, shardings)
        start = int(meta["iterations_done"])
        history = [metrics_so_far] if start else []
        bar.start = bar.done = start
    main_proc = jax.process_index() == 0

    run_population = jax.vmap(trainer.run, in_axes=(0, 0, None))
    init_fn = jax.jit(init_population, out_shardings=shardings)
    run_fn = jax.jit(run_population, static_argnums=2, out_shardings=(shardings, pop_sharding))

    # Work in the run folder itself when checkpointing chunks (so --resume can find it);
    # otherwise in a temporary folder renamed at the end (a run folder is whole or absent).
    import yaml

    work = out if chunked else out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        if main_proc:
            work.mkdir(parents=True, exist_ok=True)
            (work / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
            if args.tensorboard:
                tb = mlib.TensorBoardWriter(work / "tensorboard", labels)

        # Compile every chunk length this run needs, timed apart from running.
        t0 = time.perf_counter()
        if not resume:
            state = init_fn(key_data, hps)
        lengths = sorted({min(chunk, total - i) for i in range(start, total, chunk)})
        compiled = {k: run_fn.lower(state, hps, k).compile() for k in lengths}
        compile_s = time.perf_counter() - t0

        run_facts = {
            "config": config.to_dict(),
            "seeds": seeds,
            "seed": args.seed,
            "sweep": sweep.to_dict(),
            "num_iterations": total,
            "chunk_iterations": chunk,
            "population": population,
        }
        wall_s = float(meta.get("wall_seconds", 0.0))
        compile_total = float(meta.get("compile_seconds", 0.0)) + compile_s
        done = start
        while done < total:
            k = min(chunk, total - done)
            t0 = time.perf_counter()
            state, chunk_metrics = compiled[k](state, hps)
            jax.block_until_ready(chunk_metrics)
            wall_s += time.perf_counter() - t0
            chunk_metrics = mlib.to_numpy(parallel.to_host(chunk_metrics))
            history.append(chunk_metrics)
            if tb is not None:
                tb.write(chunk_metrics, done, config.batch_size)
            done += k
            if chunked or done == total:
                so_far = {n: np.concatenate([h[n] for h in history], axis=1) for n in history[0]}
                history = [so_far]
                checkpoint.save_step(
                    work / "checkpoint",
                    state,
                    so_far,
                    {
                        **run_facts,
                        "iterations_done": done,
                        "wall_seconds": wall_s,
                        "compile_seconds": compile_total,
                        "num_devices": num_devices,
                    },
                    config,
                )
            if chunked and stop.signum is not None and done < total:
                bar.close()
                name = signal.Signals(stop.signum).name
                print(
                    f"error: interrupted by {name} after iteration {done} of {total}; "
                    f"checkpoint saved; resume with: python train.py --resume {out}",
                    file=sys.stderr,
                )
                return 128 + stop.signum
        bar.close()
        metrics = history[0]

        eval_keys = parallel.put(
            sweeplib.population_key_data(args.seed + 1, seeds, len(settings)), pop_sharding
        )
        eval_fn = jax.jit(lambda s, kd: jax.vmap(evaluate)(s, jax.random.wrap_key_data(kd)))
        eval_returns = np.asarray(parallel.to_host(eval_fn(state, eval_keys)))
        host_state = parallel.to_host(
            jax.tree.map(
                lambda x: (
                    jax.random.key_data(x)
                    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                    else x
                ),
                state,
            )
        )
        summary = _summary(
            config,
            args,
            metrics,
            eval_returns,
            host_state,
            sweep,
            settings,
            wall_s,
            compile_total,
            num_devices,
            chunk,
            len(compiled),
        )
        if main_proc:
            _write_outputs(work, config, metrics, summary, sweep, settings, labels, seeds)
            if not chunked:
                if out.exists():
                    out.rmdir()  # validated empty in prepare()
                work.rename(out)
    finally:
        bar.close()
        if tb is not None:
            tb.close()
        if not chunked and work.exists() and work != out:
            shutil.rmtree(work, ignore_errors=True)

    if not main_proc:
        return 0
    print_summary(summary, out)
    if "diverged" in summary:
        d = summary["diverged"]
        print(
            f"error: run diverged: seed {d['seed']} became non-finite at iteration "
            f"{d['iteration']} ({d['metric']}); parameters before it were kept in {out}",
            file=sys.stderr,
        )
        return 1
    return 0


def _summary(
    config,
    args,
    metrics,
    eval_returns,
    state,
    sweep,
    settings,
    wall_s,
    compile_s,
    num_devices,
    chunk,
    programs,
) -> dict[str, Any]:
    import jax
    import numpy as np

    from rlax_trpo import metrics as mlib
    from rlax_trpo import sweep as sweeplib

    seeds = args.seeds
    population = len(settings) * seeds
    finals = mlib.final_returns(metrics)
    steps = config.num_iterations * config.batch_size
    members, best = sweeplib.member_summaries(finals, sweep, seeds, eval_returns)
    summary: dict[str, Any] = {
        "algorithm": config.algorithm,
        "env": config.env,
        "num_seeds": seeds,
        "num_settings": len(settings),
        "population": population,
        "total_env_steps": steps,
        "num_iterations": config.num_iterations,
        "chunk_iterations": chunk,
        "compiled_run_programs": programs,  # one per distinct chunk length, whole population
        "wall_seconds": wall_s,
        "compile_seconds": compile_s,
        "env_steps_per_second": steps * population / wall_s,
        "final_return_mean": float(np.nanmean(finals)) if np.isfinite(finals).any() else None,
        "final_return_std": float(np.nanstd(finals)) if np.isfinite(finals).any() else None,
        "final_return_per_seed": finals,
        "eval_return_mean": float(eval_returns.mean()),
        "eval_return_std": float(eval_returns.mean(axis=1).std()),
        "eval_episodes_per_seed": config.eval_episodes,
        "num_devices": num_devices,
        "device_layout": args.shard,
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.devices()[0].platform,
        "num_processes": jax.process_count(),
    }
    if sweep.names:
        summary["swept"] = sweep.to_dict()
    summary["members"] = members
    summary["best"] = (
        None
        if best is None
        else {
            "index": best,
            **{
                k: members[best][k]
                for k in ("hp", "final_return_mean", "final_return_iqm", "final_return_iqm_ci95")
            },
        }
    )
    diverged = np.asarray(state.diverged_at)
    bad = mlib.first_nonfinite(metrics)
    if (diverged >= 0).any() or bad is not None:
        member = int(np.argmax(diverged >= 0)) if (diverged >= 0).any() else bad[0]
        it = int(diverged[member]) if diverged[member] >= 0 else bad[1]
        summary["diverged"] = {
            "seed": member % seeds,
            "member": member,
            "iteration": it,
            "metric": bad[2] if bad else "parameters",
        }
    return summary


def _write_outputs(work, config, metrics, summary, sweep, settings, labels, seeds) -> None:
    from rlax_trpo import metrics as mlib

    population = len(settings) * seeds
    extra = {
        name: [float(settings[m // seeds][name]) for m in range(population)] for name in sweep.names
    }
    mlib.write_metrics_csv(
        work / "metrics.csv",
        metrics,
        config.batch_size,
        extra,
        seed_ids=[m % seeds for m in range(population)],
    )
    mlib.plot_learning_curve(
        work / "learning_curve.png",
        metrics,
        config.batch_size,
        f"{config.algorithm} on {config.env}",
    )
    if sweep.names:
        mlib.plot_members(
            work / "sweep.png",
            metrics,
            config.batch_size,
            labels,
            f"{config.algorithm} on {config.env}: {len(settings)} settings x {seeds} seeds",
        )
    tmp = work / ".summary.json.tmp"
    mlib.write_json(tmp, summary)
    os.replace(tmp, work / "summary.json")  # written last: a run with summary.json is whole


def print_summary(summary: dict[str, Any], out: Path) -> None:
    fr, fs = summary.get("final_return_mean"), summary.get("final_return_std")
    final = f"{fr:.1f} +- {fs:.1f}" if fr is not None else "n/a (no finished episodes)"
    settings = summary.get("num_settings", 1)
    who = f"{summary['num_seeds']} seed(s)" + (f" x {settings} settings" if settings > 1 else "")
    devices = summary.get("num_devices", 1)
    print(
        f"{summary['algorithm']} on {summary['env']}: {who} x "
        f"{summary['total_env_steps']:,} env steps in {summary['wall_seconds']:.1f} s "
        f"(+ {summary['compile_seconds']:.1f} s compile) on {devices} device(s), "
        f"{summary['env_steps_per_second']:,.0f} env steps/s\n"
        f"final return (training policy, last 10% of iterations): {final}\n"
        f"greedy evaluation return: {summary['eval_return_mean']:.1f}"
    )
    if settings > 1:
        from rlax_trpo.sweep import setting_label

        for m in summary["members"]:
            iqm, ci = m["final_return_iqm"], m["final_return_iqm_ci95"]
            shown = f"IQM {iqm:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]" if iqm is not None else "n/a"
            mark = "  <- best" if summary["best"] and summary["best"]["index"] == m["index"] else ""
            print(f"  {setting_label(m['hp'])}: final return {shown}{mark}")
    print(f"run folder: {out}")


def main(argv: list[str] | None = None) -> int:
    from rlax_trpo.errors import ConfigError
    from rlax_trpo.platform import apply_cpu_workarounds

    apply_cpu_workarounds()  # before JAX starts its backend; see rlax_trpo/platform.py
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["eval"]:
            return eval_main(argv[1:])
        args, raw = prepare(argv)
        if raw.get("algorithm") == "grpo_lm":
            from rlax_trpo.lm import run as lm_run

            lm_run.validate(raw)
            out = args.out or Path("runs") / f"grpo_lm_{dt.datetime.now():%Y%m%d-%H%M%S}"
            lm_run.main(raw, out, seeds=args.seeds, progress=not args.no_progress)
            return 0
        if args.coordinator_address is not None or args.num_processes is not None:
            from rlax_trpo.parallel import initialize_distributed

            initialize_distributed(args.coordinator_address, args.num_processes, args.process_id)
        return run_control(args, raw)
    except (UsageError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------- evaluation


def build_eval_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="train.py eval",
        description="Evaluate a finished (or checkpointed) run: greedy and sampling "
        "policies, N episodes per seed; optionally render a GIF.",
    )
    p.add_argument("--run", type=Path, required=True, metavar="DIR", help="run folder")
    p.add_argument("--episodes", type=int, default=10, help="episodes per seed (default 10)")
    p.add_argument("--seed", type=int, default=1234, help="evaluation PRNG seed")
    p.add_argument(
        "--gif",
        type=Path,
        nargs="?",
        const=Path("episode.gif"),
        default=None,
        metavar="PATH",
        help="render one greedy episode with gymnax's visualiser (default PATH: <run>/episode.gif)",
    )
    p.add_argument(
        "--member",
        type=int,
        default=None,
        help="population member to render (default: seed 0 of the best setting)",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="episode step limit for evaluation and the GIF (default: the env's)",
    )
    return p


def eval_main(argv: list[str]) -> int:
    """`train.py eval --run DIR [--episodes N] [--gif [PATH]]`; returns the exit status."""
    args = build_eval_parser().parse_args(argv)
    for flag, value in (("--episodes", args.episodes), ("--max-steps", args.max_steps)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be a positive integer (got {value})")
    if not args.run.is_dir():
        raise UsageError(f"--run: {str(args.run)!r} is not a run folder")
    gif = args.gif
    if gif is not None and not gif.is_absolute() and gif == Path("episode.gif"):
        gif = args.run / "episode.gif"
    if gif is not None and gif.suffix.lower() != ".gif":
        raise UsageError(f"--gif: {str(gif)!r} must end in .gif")

    from rlax_trpo import checkpoint
    from rlax_trpo import sweep as sweeplib

    ckpt = args.run / "checkpoint"
    meta = checkpoint.read_meta(ckpt)
    config = checkpoint.load_config(ckpt)
    sweep = sweeplib.Sweep.from_dict(meta.get("sweep", {}))
    settings = sweep.settings or [{}]
    seeds = int(meta.get("seeds", meta.get("population", 1)))
    population = len(settings) * seeds
    member = args.member
    if member is not None and not 0 <= member < population:
        raise UsageError(f"--member: must be between 0 and {population - 1} (got {member})")

    import jax
    import numpy as np

    from rlax_trpo.evaluate import make_episode, make_evaluate, render_gif
    from rlax_trpo.training import make_trainer

    trainer = make_trainer(config)
    hps = sweeplib.population_hparams(config.hp, sweep, seeds)
    key_data = sweeplib.population_key_data(0, seeds, len(settings))
    abstract = jax.eval_shape(
        lambda kd, hp: jax.vmap(trainer.init)(jax.random.wrap_key_data(kd), hp), key_data, hps
    )
    state, _, meta = checkpoint.restore_step(ckpt, abstract)
    keys = sweeplib.population_key_data(args.seed, seeds, len(settings))

    def both(s, kd):
        ks = jax.random.wrap_key_data(kd)
        greedy = make_evaluate(
            config, trainer.env, trainer.networks, args.episodes, True, args.max_steps
        )
        sampling = make_evaluate(
            config, trainer.env, trainer.networks, args.episodes, False, args.max_steps
        )
        return jax.vmap(greedy)(s, ks), jax.vmap(sampling)(s, ks)

    greedy, sampling = (np.asarray(x) for x in jax.jit(both)(state, keys))
    print(
        f"{config.algorithm} on {config.env}: {args.run} (iteration "
        f"{meta['iterations_done']} of {meta['num_iterations']}), {args.episodes} "
        f"episodes per seed, mean +- std over seeds"
    )
    for i, values in enumerate(settings):
        sl = slice(i * seeds, (i + 1) * seeds)
        g, s = greedy[sl].mean(axis=1), sampling[sl].mean(axis=1)
        label = sweeplib.setting_label(values)
        prefix = f"  [{label}] " if sweep.names else "  "
        print(
            f"{prefix}greedy: {g.mean():.2f} +- {g.std():.2f}   "
            f"sampling: {s.mean():.2f} +- {s.std():.2f}"
        )
    if gif is not None:
        if member is None:
            per_setting = greedy.mean(axis=1).reshape(len(settings), seeds).mean(axis=1)
            member = int(np.argmax(per_setting)) * seeds
        one = jax.tree.map(lambda x: x[member], state)
        episode = jax.jit(
            make_episode(config, trainer.env, trainer.networks, True, args.max_steps)
        )(one, jax.random.key(args.seed))
        frames = render_gif(config, jax.tree.map(np.asarray, episode), gif)
        print(f"GIF of member {member} (greedy, {frames} steps): {gif}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
