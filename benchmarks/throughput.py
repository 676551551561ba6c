#!/usr/bin/env python
"""Training throughput next to an environment-only reference measured in the same run.

For each configuration it prints one JSON object: the training run's env steps/s (compile
excluded; the fastest of `--repeats` timed runs of the compiled program, and their median),
compile seconds and final return, and the env steps/s of a random-action scan of the same
environment at the same width (no network: the ceiling the environment sets).

    python benchmarks/throughput.py                      # PPO CartPole at 4, 64, 1024 envs
    python benchmarks/throughput.py --algo trpo --num-envs 2 --num-steps 512 --total-steps 100000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo import Config, load_config, make_trainer
from rlax_trpo import metrics as mlib
from rlax_trpo.envs import make_env
from rlax_trpo.rollout import reset_envs

# PureJaxRL's CartPole configuration at three widths (total steps grow with the width so
# every run has enough iterations to time).
PUREJAXRL = Path(__file__).resolve().parents[1] / "configs" / "ppo_cartpole_purejaxrl.yaml"
DEFAULT_RUNS = [(4, 128, 500_000), (64, 128, 2_000_000), (1024, 128, 4_194_304)]


def env_only_steps_per_second(
    env_name: str, num_envs: int, num_steps: int, total: int, repeats: int = 2
) -> float:
    """Random actions through the vmapped env step, as a scan of the same shape as training."""
    env = make_env(env_name)
    spec = env.spec
    iterations = max(1, total // (num_envs * num_steps))

    def random_action(key):
        if spec.discrete:
            return jax.random.randint(key, (num_envs,), 0, spec.num_actions)
        return jax.random.uniform(
            key, (num_envs, spec.num_actions), minval=spec.action_low, maxval=spec.action_high
        )

    def run(key):
        obs, state = reset_envs(env, key, num_envs)

        def step(carry, k):
            state, acc = carry
            k_a, k_e = jax.random.split(k)
            res = jax.vmap(env.step)(jax.random.split(k_e, num_envs), state, random_action(k_a))
            return (res.state, acc + res.reward.sum()), None

        (_, acc), _ = jax.lax.scan(
            step, (state, jnp.zeros(())), jax.random.split(key, iterations * num_steps)
        )
        return acc

    f = jax.jit(run).lower(jax.random.key(0)).compile()
    jax.block_until_ready(f(jax.random.key(0)))
    best = np.inf
    for r in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(jax.random.key(r + 1)))
        best = min(best, time.perf_counter() - t0)
    return iterations * num_steps * num_envs / best


def train_once(config: Config, seeds: int, repeats: int = 3) -> dict:
    trainer = make_trainer(config)
    if seeds == 1:  # one run: jit(train) itself (a 1-seed vmap adds batch dimensions only)
        keys = jax.random.key(0)
        fn = jax.jit(trainer.train)
    else:
        keys = jax.random.split(jax.random.key(0), seeds)
        fn = jax.jit(jax.vmap(trainer.train, in_axes=(0, None)))
    t0 = time.perf_counter()
    compiled = fn.lower(keys, config.hp).compile()
    compile_s = time.perf_counter() - t0
    walls = []
    for _ in range(repeats):  # the same program and key: the same run, timed again
        t0 = time.perf_counter()
        _, metrics = compiled(keys, config.hp)
        jax.block_until_ready(metrics)
        walls.append(time.perf_counter() - t0)
    finals = mlib.final_returns(mlib.to_numpy(metrics))  # adds the seed axis for one seed
    steps = config.num_iterations * config.batch_size * seeds
    return {
        "env_steps_per_second": steps / min(walls),
        "env_steps_per_second_median": steps / float(np.median(walls)),
        "compile_seconds": compile_s,
        "wall_seconds": min(walls),
        "final_return_mean": float(np.nanmean(finals)),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--config",
        type=Path,
        help="YAML to start from (default: PureJaxRL's PPO CartPole settings)",
    )
    p.add_argument("--algo", default=None, help="algorithm (ppo, trpo, npg, vpg, grpo)")
    p.add_argument("--env", default=None)
    p.add_argument("--num-envs", type=int, nargs="*", help="one or more widths")
    p.add_argument("--num-steps", type=int, default=None)
    p.add_argument("--total-steps", type=int, default=None)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed runs per configuration; steps/s of the fastest and the median",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)

    if args.num_envs:
        runs = [(n, args.num_steps or 128, args.total_steps or 500_000) for n in args.num_envs]
    else:
        runs = [(n, args.num_steps or s, args.total_steps or t) for n, s, t in DEFAULT_RUNS]
    print(
        json.dumps(
            {
                "device": jax.devices()[0].device_kind,
                "backend": jax.default_backend(),
                "jax": jax.__version__,
                "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
            }
        )
    )
    for num_envs, num_steps, total in runs:
        extra = [f"num_envs={num_envs}", f"num_steps={num_steps}", f"total_env_steps={total}"]
        if args.algo:
            extra.append(f"algorithm={args.algo}")
        if args.env:
            extra.append(f"env={args.env}")
        config = load_config(args.config or PUREJAXRL, [*args.overrides, *extra])
        result = train_once(config, args.seeds, args.repeats)
        reference = env_only_steps_per_second(
            config.env, num_envs, num_steps, config.num_iterations * config.batch_size
        )
        print(
            json.dumps(
                {
                    "algorithm": config.algorithm,
                    "env": config.env,
                    "num_envs": num_envs,
                    "num_steps": num_steps,
                    "total_env_steps": config.num_iterations * config.batch_size,
                    "seeds": args.seeds,
                    **{k: round(v, 3) for k, v in result.items()},
                    "env_only_random_steps_per_second": round(reference),
                    "training_over_env_only": round(result["env_steps_per_second"] / reference, 4),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
