#!/usr/bin/env python
"""Train policy-optimisation agents: `python train.py [--config PATH] [--seeds N] [key=value ...]`.

With no arguments it trains PPO on CartPole-v1 (the embedded default, about a minute on a
2-core CPU). Every seed runs inside one compiled, vmapped call. The run folder gets
`config.yaml`, `metrics.csv`, `summary.json`, `learning_curve.png` and `checkpoint/`.

Bad input prints one line naming the problem and exits with status 2, writing nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

# Embedded default (the same as configs/ppo_cartpole.yaml): PPO on CartPole-v1 with RL Zoo's
# tuned settings; 4/4 seeds reach 500 within 200k steps.
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
    "hp": {"learning_rate": 1e-3, "gamma": 0.98, "gae_lambda": 0.8, "clip_eps": 0.2,
           "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5},
}


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit status 2
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="train.py",
        description="Train VPG/NPG/TRPO/PPO/GRPO agents, all seeds in one compiled call.",
        epilog="Overrides use the YAML keys: num_envs=64 hp.learning_rate=1e-3 env=Acrobot-v1",
    )
    p.add_argument("--config", type=Path, help="YAML file (see configs/); default: embedded "
                   "PPO CartPole-v1")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds, vmapped (default 1)")
    p.add_argument("--seed", type=int, default=0, help="base PRNG seed (default 0)")
    p.add_argument("--out", type=Path, help="run folder (default runs/<algo>_<env>_<time>)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return p


def prepare(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse and validate everything; raises UsageError/ConfigError before any write."""
    from rlax_trpo.config import merge_overrides, parse_overrides, read_yaml

    args = build_parser().parse_args(argv)
    if args.seeds < 1:
        raise UsageError(f"--seeds: must be a positive integer (got {args.seeds})")
    raw = read_yaml(args.config) if args.config else dict(DEFAULT_CONFIG)
    raw = merge_overrides(raw, parse_overrides(args.overrides))
    if args.out is not None and args.out.exists() and (
        not args.out.is_dir() or any(args.out.iterdir())
    ):
        raise UsageError(f"--out: {str(args.out)!r} exists and is not an empty directory")
    return args, raw


def run_control(args: argparse.Namespace, raw: dict[str, Any]) -> int:
    import jax
    import numpy as np

    from rlax_trpo import checkpoint
    from rlax_trpo import metrics as mlib
    from rlax_trpo.config import Config
    from rlax_trpo.envs import check_env_name
    from rlax_trpo.evaluate import make_evaluate
    from rlax_trpo.training import make_trainer

    config = Config.create(**raw)
    check_env_name(config.env)
    hp = config.hp
    bar = mlib.ProgressBar(config.num_iterations, config.batch_size,
                           enabled=not args.no_progress)
    trainer = make_trainer(config, progress=bar)  # raises ConfigError for unknown algorithms
    evaluate = make_evaluate(config, trainer.env, trainer.networks, config.eval_episodes)
    out = args.out or Path("runs") / (
        f"{config.algorithm}_{config.env}_{dt.datetime.now():%Y%m%d-%H%M%S}"
    )

    keys = jax.random.split(jax.random.key(args.seed), args.seeds)
    train_fn = jax.jit(jax.vmap(trainer.train, in_axes=(0, None)))
    t0 = time.perf_counter()
    compiled = train_fn.lower(keys, hp).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = compiled(keys, hp)
    jax.block_until_ready(metrics)
    wall_s = time.perf_counter() - t0
    bar.close()

    eval_keys = jax.random.split(jax.random.key(args.seed + 1), args.seeds)
    eval_returns = np.asarray(jax.jit(jax.vmap(evaluate))(state, eval_keys))
    metrics = mlib.to_numpy(metrics)
    finals = mlib.final_returns(metrics)
    steps = config.num_iterations * config.batch_size
    summary = {
        "algorithm": config.algorithm,
        "env": config.env,
        "num_seeds": args.seeds,
        "total_env_steps": steps,
        "num_iterations": config.num_iterations,
        "wall_seconds": wall_s,
        "compile_seconds": compile_s,
        "env_steps_per_second": steps * args.seeds / wall_s,
        "final_return_mean": float(np.nanmean(finals)) if np.isfinite(finals).any() else None,
        "final_return_std": float(np.nanstd(finals)) if np.isfinite(finals).any() else None,
        "final_return_per_seed": finals,
        "eval_return_mean": float(eval_returns.mean()),
        "eval_return_std": float(eval_returns.mean(axis=1).std()),
        "eval_episodes_per_seed": config.eval_episodes,
        "num_devices": jax.device_count(),
        "device": str(jax.devices()[0].device_kind),
    }
    diverged = np.asarray(state.diverged_at)
    bad = mlib.first_nonfinite(metrics)
    if (diverged >= 0).any() or bad is not None:
        seed = int(np.argmax(diverged >= 0)) if (diverged >= 0).any() else bad[0]
        it = int(diverged[seed]) if diverged[seed] >= 0 else bad[1]
        summary["diverged"] = {"seed": seed, "iteration": it,
                               "metric": bad[2] if bad else "parameters"}

    # Write into a temporary folder and rename it: a run folder is whole or absent.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        tmp.mkdir()
        import yaml

        (tmp / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        mlib.write_metrics_csv(tmp / "metrics.csv", metrics, config.batch_size)
        mlib.write_json(tmp / "summary.json", summary)
        mlib.plot_learning_curve(tmp / "learning_curve.png", metrics, config.batch_size,
                                 f"{config.algorithm} on {config.env}")
        checkpoint.save(tmp / "checkpoint", state, config)
        if out.exists():
            out.rmdir()  # validated empty in prepare()
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

    print_summary(summary, out)
    if "diverged" in summary:
        d = summary["diverged"]
        print(f"error: run diverged: seed {d['seed']} became non-finite at iteration "
              f"{d['iteration']} ({d['metric']}); parameters before it were kept in {out}",
              file=sys.stderr)
        return 1
    return 0


def print_summary(summary: dict[str, Any], out: Path) -> None:
    fr, fs = summary.get("final_return_mean"), summary.get("final_return_std")
    final = f"{fr:.1f} +- {fs:.1f}" if fr is not None else "n/a (no finished episodes)"
    print(
        f"{summary['algorithm']} on {summary['env']}: {summary['num_seeds']} seed(s) x "
        f"{summary['total_env_steps']:,} env steps in {summary['wall_seconds']:.1f} s "
        f"(+ {summary['compile_seconds']:.1f} s compile), "
        f"{summary['env_steps_per_second']:,.0f} env steps/s\n"
        f"final return (training policy, last 10% of iterations): {final}\n"
        f"greedy evaluation return: {summary['eval_return_mean']:.1f}\n"
        f"run folder: {out}"
    )


def main(argv: list[str] | None = None) -> int:
    from rlax_trpo.errors import ConfigError

    argv = sys.argv[1:] if argv is None else argv
    try:
        args, raw = prepare(argv)
        if raw.get("algorithm") == "grpo_lm":
            from rlax_trpo.lm import run as lm_run

            lm_run.validate(raw)
            out = args.out or Path("runs") / f"grpo_lm_{dt.datetime.now():%Y%m%d-%H%M%S}"
            lm_run.main(raw, out, seeds=args.seeds, progress=not args.no_progress)
            return 0
        return run_control(args, raw)
    except (UsageError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
