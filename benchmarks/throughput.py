#!/usr/bin/env python
"""Training throughput next to references measured in the same run.

For each width (`--num-envs`) and seed count (`--seeds`) it prints one JSON object: the
training run's env steps/s (all seeds, compile excluded; the fastest of `--repeats` timed runs
of the compiled program, and their median), compile seconds and final return, and the env
steps/s of a random-action scan of the same environment at the same total width (no network:
the ceiling the environment sets). With `--purejaxrl PATH/ppo.py` the same sizes also run
through PureJaxRL's own PPO (`benchmarks/_purejaxrl.py`), timed the same way.

    python benchmarks/throughput.py                      # PPO CartPole at 4, 64, 1024 envs
    python benchmarks/throughput.py --config trpo_cartpole --total-steps 200000  # its 2 envs
    python benchmarks/throughput.py --num-envs 2048 8192 --iterations 10 --purejaxrl ppo.py
    python benchmarks/throughput.py --config trpo_cartpole --seeds 1 16 --json out.json
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
from _publish import parse_with_overrides, publish

from rlax_trpo.config import load_config
from rlax_trpo.envs import make_env
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment.program import make_program
from rlax_trpo.report import stats
from rlax_trpo.rollout import reset_envs

# PureJaxRL's CartPole configuration at three widths (total steps grow with the width so
# every run has enough iterations to time).
DEFAULT_CONFIG = "ppo_cartpole_purejaxrl"
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


def timed(fn, args, env_steps: int, repeats: int) -> tuple[dict, object]:
    """Compile `fn` for `args`, run it `repeats` times; speed figures and the last output."""
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    walls = []
    for _ in range(repeats):  # the same program and key: the same run, timed again
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        walls.append(time.perf_counter() - t0)
    return {
        "env_steps_per_second": env_steps / min(walls),
        "env_steps_per_second_median": env_steps / float(np.median(walls)),
        "compile_seconds": compile_s,
        "wall_seconds": min(walls),
    }, out


def train_once(config, seeds: int, repeats: int = 3) -> dict:
    """This library's run of `config` over `seeds` seeds, one compiled call."""
    program = make_program(config)
    iterations = config.num_iterations

    def train(key, hp):
        return program.run(program.init(key, hp), hp, iterations)

    if seeds == 1:  # one run: jit(train) itself (a 1-seed vmap adds batch dimensions only)
        fn, keys = jax.jit(train), jax.random.key(0)
    else:
        fn = jax.jit(jax.vmap(train, in_axes=(0, None)))
        keys = jax.random.split(jax.random.key(0), seeds)
    steps = iterations * program.steps_per_iteration * seeds
    result, (_, metrics) = timed(fn, (keys, program.hparams), steps, repeats)
    finals = stats.final_returns(stats.to_numpy(metrics))  # adds the seed axis for one seed
    return {**result, "final_return_mean": float(np.nanmean(finals))}


def purejaxrl_once(module, config, seeds: int, repeats: int = 3) -> dict:
    """PureJaxRL's PPO at the same sizes and settings, timed the same way."""
    import _purejaxrl

    fn, keys, steps = _purejaxrl.make_run(module, config, seeds)
    result, out = timed(fn, (keys,), steps, repeats)
    return {**result, "final_return_mean": _purejaxrl.final_return(out["metrics"])}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--config",
        default=DEFAULT_CONFIG,
        help="bundled config name or YAML (default: PureJaxRL's PPO CartPole settings)",
    )
    p.add_argument("--env", default=None)
    p.add_argument("--num-envs", type=int, nargs="+", help="one or more widths")
    p.add_argument("--num-steps", type=int, default=None)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--total-steps", type=int, default=None, help="env steps per seed")
    size.add_argument(
        "--iterations", type=int, default=None, help="iterations per run, at every width"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1], help="one or more seed counts")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed runs per configuration; steps/s of the fastest and the median",
    )
    p.add_argument(
        "--purejaxrl",
        type=Path,
        default=None,
        metavar="PPO_PY",
        help="PureJaxRL's purejaxrl/ppo.py (wrappers.py beside it): time it at the same sizes",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = parse_with_overrides(p, argv)
    for flag in ("num_envs", "seeds"):
        if any(n < 1 for n in getattr(args, flag) or []):
            p.error(f"--{flag.replace('_', '-')}: must be positive integers")
    for flag in ("num_steps", "total_steps", "iterations", "repeats"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')}: must be a positive integer (got {value})")
    if args.purejaxrl is not None and not args.purejaxrl.is_file():
        p.error(f"--purejaxrl: {str(args.purejaxrl)!r} does not exist")
    return args


def runs_of(args: argparse.Namespace) -> list[list[str]]:
    """The size overrides of each width: `--num-envs`, else the config's own width (one run),
    else, for the default config with no size given, PureJaxRL's three widths."""
    if not args.num_envs:
        sized = args.num_steps or args.total_steps or args.iterations
        if args.config == DEFAULT_CONFIG and not sized:
            return [
                [f"num_envs={n}", f"num_steps={s}", f"total_env_steps={t}"]
                for n, s, t in DEFAULT_RUNS
            ]
        return [[*_steps(args)]]
    return [[f"num_envs={n}", *_steps(args)] for n in args.num_envs]


def _steps(args: argparse.Namespace) -> list[str]:
    extra = [f"num_steps={args.num_steps}"] if args.num_steps else []
    return extra + ([f"total_env_steps={args.total_steps}"] if args.total_steps else [])


def configs_of(args: argparse.Namespace) -> list:
    """The config of every width, checked before anything runs (exit 2 on a bad one). With
    `--iterations` the total is that many iterations of the width's own batch, set before the
    config's own total is checked against the batch."""
    from rlax_trpo.config import ControlFields
    from rlax_trpo.config.configuration import raw_config

    default = {k: ControlFields.model_fields[k].default for k in ("num_envs", "num_steps")}
    configs = []
    for extra in runs_of(args):
        if args.env:
            extra = [*extra, f"env={args.env}"]
        try:
            if args.iterations:
                raw = raw_config(args.config, [*args.overrides, *extra])
                batch = int(raw.get("num_envs", default["num_envs"])) * int(
                    raw.get("num_steps", default["num_steps"])
                )
                extra = [*extra, f"total_env_steps={args.iterations * batch}"]
            configs.append(load_config(args.config, [*args.overrides, *extra]))
        except (ConfigError, TypeError, ValueError) as err:
            print(f"throughput.py: {err}", file=sys.stderr)
            sys.exit(2)
    return configs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configs = configs_of(args)
    if args.purejaxrl is not None and any(c.algorithm != "ppo" for c in configs):
        print(
            "throughput.py: --purejaxrl: PureJaxRL's ppo.py is PPO; the config is not",
            file=sys.stderr,
        )
        sys.exit(2)
    module = None
    if args.purejaxrl is not None:
        import _purejaxrl

        module = _purejaxrl.load(args.purejaxrl)
    header = {
        "device": jax.devices()[0].device_kind,
        "backend": jax.default_backend(),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
    }
    print(json.dumps({**header, "jax": jax.__version__}), flush=True)
    results = []
    for config in configs:
        for seeds in args.seeds:
            results.extend(measure(config, seeds, args.repeats, module))
    publish("throughput", {**header, "results": results}, args.json)


def measure(config, seeds: int, repeats: int, module) -> list[dict]:
    """One JSON line per implementation at one size."""
    width = config.num_envs * seeds
    reference = env_only_steps_per_second(
        config.env, width, config.num_steps, config.num_iterations * config.batch_size * seeds
    )
    base = {
        "algorithm": config.algorithm,
        "env": config.env,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "total_env_steps": config.num_iterations * config.batch_size,
        "seeds": seeds,
        "env_only_random_steps_per_second": round(reference),
    }
    runs = [("rlax_trpo", lambda: train_once(config, seeds, repeats))]
    if module is not None:
        runs.append(("purejaxrl", lambda: purejaxrl_once(module, config, seeds, repeats)))
    lines = []
    for name, fn in runs:
        result = fn()
        line = {
            "implementation": name,
            **base,
            **{k: round(v, 3) for k, v in result.items()},
            "training_over_env_only": round(result["env_steps_per_second"] / reference, 4),
        }
        print(json.dumps(line), flush=True)
        lines.append(line)
    return lines


if __name__ == "__main__":
    main()
