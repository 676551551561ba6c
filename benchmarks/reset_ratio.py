#!/usr/bin/env python
"""Cheap resets: training env steps/s with `reset_ratio` against resetting every environment.

One invocation trains the same config at the same width with each `--ratios` value (1 is
every environment resetting on its own, the reset-every-step-and-select pattern) and prints
the env steps/s of each (compile excluded; the fastest of `--repeats` timed runs of the
compiled program, and their median), the speed-up over ratio 1, and, as the ceiling the
environment sets, a random-action scan of the same width with the same resets.

    python benchmarks/reset_ratio.py                                     # PPO, Craftax-Symbolic
    python benchmarks/reset_ratio.py --config ppo_craftax num_envs=256 "hidden_sizes=[64,64]"
    python benchmarks/reset_ratio.py --json benchmarks/results/reset_ratio_2core.json
    python benchmarks/reset_ratio.py env=jumanji/Maze-v0 --config ppo_jumanji_maze

Published: docs/results.md (Craftax-Symbolic, 2-core CPU).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import jax.numpy as jnp
import numpy as np
from _publish import publish
from throughput import timed

from rlax_trpo.config import load_config
from rlax_trpo.envs import make_env
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment.program import make_program
from rlax_trpo.rollout import batched_step, reset_envs

DEFAULT_OVERRIDES = ["num_envs=256", "num_steps=32", "hidden_sizes=[64,64]"]


def env_only(env_name: str, env_kwargs: dict, num_envs: int, ratio: int, steps: int) -> float:
    """Random actions through the batched step (pooled resets when `ratio > 1`)."""
    env = make_env(env_name, env_kwargs)
    step = batched_step(env, num_envs, ratio)

    def run(key):
        _, state = reset_envs(env, key, num_envs)

        def body(carry, k):
            state, acc = carry
            k_a, k_e = jax.random.split(k)
            action = jax.random.randint(k_a, (num_envs,), 0, env.spec.num_actions)
            res = step(k_e, state, action)
            return (res.state, acc + res.reward.sum()), None

        (_, acc), _ = jax.lax.scan(body, (state, jnp.zeros(())), jax.random.split(key, steps))
        return acc

    figures, _ = timed(jax.jit(run), (jax.random.key(0),), steps * num_envs, 2)
    return figures["env_steps_per_second"]


def train_steps_per_second(config, repeats: int) -> dict:
    program = make_program(config)
    iterations = config.num_iterations

    def train(key, hp):
        return program.run(program.init(key, hp), hp, iterations)

    steps = iterations * program.steps_per_iteration
    figures, (_, metrics) = timed(jax.jit(train), (jax.random.key(0), program.hparams), steps,
                                  repeats)  # fmt: skip
    count = np.asarray(metrics["episode/count"]).sum()
    return {**figures, "episodes_finished": int(count)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="ppo_craftax", help="bundled name or YAML")
    p.add_argument("--ratios", type=int, nargs="+", default=[1, 16])
    p.add_argument("--iterations", type=int, default=3, help="iterations per timed run")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--env-steps", type=int, default=64, help="steps of the env-only scan")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help=f"config overrides (default: {' '.join(DEFAULT_OVERRIDES)})")  # fmt: skip
    args = p.parse_intermixed_args(argv)
    if any(r < 1 for r in args.ratios) or args.iterations < 1 or args.repeats < 1:
        p.error("--ratios, --iterations and --repeats must be positive")
    overrides = args.overrides or DEFAULT_OVERRIDES
    try:
        configs = {}
        for r in args.ratios:
            base = load_config(args.config, [*overrides, f"reset_ratio={r}"])
            total = base.batch_size * args.iterations
            configs[r] = load_config(
                args.config, [*overrides, f"reset_ratio={r}", f"total_env_steps={total}"]
            )
    except ConfigError as err:
        print(f"reset_ratio.py: {err}", file=sys.stderr)
        return 2
    rows = []
    for r, config in configs.items():
        start = time.perf_counter()
        train = train_steps_per_second(config, args.repeats)
        row = {
            "reset_ratio": r,
            "env": config.env,
            "num_envs": config.num_envs,
            "num_steps": config.num_steps,
            "hidden_sizes": list(config.hidden_sizes),
            "env_only_random_steps_per_second": env_only(
                config.env, config.env_kwargs, config.num_envs, r, args.env_steps
            ),
            **train,
            "seconds": time.perf_counter() - start,
        }
        rows.append(row)
        print({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    base = next((row for row in rows if row["reset_ratio"] == 1), None)
    for row in rows:
        if base is not None:
            row["speedup_over_ratio_1"] = row["env_steps_per_second"] / base["env_steps_per_second"]
    publish("reset_ratio", {"config": args.config, "overrides": overrides, "results": rows},
            args.json)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
