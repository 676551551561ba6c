#!/usr/bin/env python
"""Recurrent PPO here and PureJaxRL's own `ppo_rnn.py`, same task, budget and widths, in one
invocation: final return and env steps/s of each.

Both train on velocity-free CartPole (`pomdp/CartPole-v1`) at PureJaxRL's ppo_rnn settings
(`ppo_memory_cartpole_purejaxrl.yaml`). Each seed is one compiled run timed after
compilation (the fastest of `--repeats`); PureJaxRL runs its seeds one at a time (vmapped, its
flax LAPACK initialisers hang jaxlib's CPU runtime), and so, for the speed figure, does this
library; the return is the mean over seeds of the episodes that ended in the last tenth of the
updates, computed the same way for both.

    python benchmarks/memory_vs_purejaxrl.py --purejaxrl PATH/purejaxrl/ppo_rnn.py --seeds 4
    python benchmarks/memory_vs_purejaxrl.py --total-steps 20480 --seeds 1   # ours only
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import numpy as np
from _publish import publish
from throughput import timed

from rlax_trpo.config import load_config
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment.program import make_program

CONFIG = "ppo_memory_cartpole_purejaxrl"


def tail_return(returned: np.ndarray, count: np.ndarray, last_fraction: float = 0.1) -> float:
    """Mean return of the episodes that ended in the last `last_fraction` of iterations."""
    tail = max(1, int(np.ceil(len(count) * last_fraction)))
    n = count[-tail:].sum()
    return float(returned[-tail:].sum() / n) if n else float("nan")


def ours(config, seed: int, repeats: int) -> dict:
    program = make_program(config)
    iterations = config.num_iterations

    def train(key, hp):
        return program.run(program.init(key, hp), hp, iterations)

    steps = iterations * program.steps_per_iteration
    result, (_, metrics) = timed(
        jax.jit(train), (jax.random.key(seed), program.hparams), steps, repeats
    )
    ret = tail_return(
        np.asarray(metrics["episode/return_sum"]), np.asarray(metrics["episode/count"])
    )
    return {**result, "final_return": ret}


def theirs(module, config, seed: int, repeats: int) -> dict:
    import _purejaxrl_rnn

    fn, _, steps = _purejaxrl_rnn.make_run(module, config)
    result, out = timed(fn, (jax.random.PRNGKey(seed),), steps, repeats)
    return {**result, "final_return": _purejaxrl_rnn.final_return(out)}


def summarize(runs: list[dict]) -> dict:
    return {
        "final_return_mean": float(np.mean([r["final_return"] for r in runs])),
        "final_return_per_seed": [r["final_return"] for r in runs],
        "env_steps_per_second": float(np.median([r["env_steps_per_second"] for r in runs])),
        "compile_seconds": float(np.median([r["compile_seconds"] for r in runs])),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=CONFIG)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=None, help="env steps per seed")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--purejaxrl", type=Path, default=None, metavar="PPO_RNN_PY")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.repeats < 1 or (args.total_steps or 1) < 1:
        p.error("--seeds, --repeats and --total-steps must be positive")
    if args.purejaxrl is not None and not args.purejaxrl.is_file():
        p.error(f"--purejaxrl: {str(args.purejaxrl)!r} does not exist")
    extra = [f"total_env_steps={args.total_steps}"] if args.total_steps else []
    try:
        config = load_config(args.config, [*args.overrides, *extra])
    except ConfigError as err:
        print(f"memory_vs_purejaxrl.py: {err}", file=sys.stderr)
        sys.exit(2)
    figures = {"env": config.env, "total_env_steps": config.num_iterations * config.batch_size}
    figures["ours"] = summarize([ours(config, s, args.repeats) for s in range(args.seeds)])
    if args.purejaxrl is not None:
        import _purejaxrl_rnn

        module = _purejaxrl_rnn.load(args.purejaxrl)
        runs = [theirs(module, config, s, args.repeats) for s in range(args.seeds)]
        figures["purejaxrl"] = summarize(runs)
        for key in ("final_return_mean", "env_steps_per_second"):
            figures[f"{key}_ratio"] = figures["ours"][key] / figures["purejaxrl"][key]
    publish("memory_vs_purejaxrl", {"device": jax.devices()[0].device_kind, **figures}, args.json)


if __name__ == "__main__":
    main()
