#!/usr/bin/env python
"""Seconds per TRPO (or NPG) update on one batch, for each value of one setting, timed
alternately in one process.

It resolves the configuration, collects one batch with the initial policy, compiles
`algorithm.update` once for each value of `--field`, then times `--repeats` rounds in which
every value's update runs once (so a busy machine slows them alike), and prints each value's
median seconds per update, its ratio to the first value's, and the line search's candidates
tried on that batch (the batch collected as training collects it: memory policies and the
vine included; observations unnormalised). An update is the whole learner step: the
surrogate's gradient, CG on Fisher-vector products, the line search, the critic's epochs.

    python benchmarks/trpo_update.py --config configs/trpo_craftax.yaml num_envs=256 \\
        num_steps=32 fisher_fraction=0.25 value_minibatches=16 hp.max_kl=0.02 \\
        --field line_search_batch --values 0 1 --repeats 5 \\
        --json benchmarks/results/trpo_update_craftax_2core.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlax_trpo.platform import setup_cpu

setup_cpu()

import jax
from _publish import parse_with_overrides, publish

from rlax_trpo import load_config, make_trainer
from rlax_trpo.errors import ConfigError
from rlax_trpo.rollout import EnvCarry, collect
from rlax_trpo.training import acting_policy


def compiled_update(config_file: str, overrides: list[str]):
    """(update, its arguments) for the configuration's first batch, compiled."""
    config = load_config(config_file, overrides)
    if config.algorithm not in ("trpo", "npg"):
        raise ConfigError(f"trpo_update.py times TRPO and NPG; the config is {config.algorithm}")
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0), config.hp)
    # as the training loop acts: the policy's memory and the vine's own collection included
    policy = acting_policy(trainer.networks, state.params, lambda obs: obs)
    carry = EnvCarry(state.env_state, state.obs, state.episode, state.memory, state.first)
    collect_fn = trainer.algorithm.collect or collect
    rollout = collect_fn(trainer.env, policy, carry, jax.random.key(1), config.num_steps)
    batch = trainer.algorithm.make_batch(state.params, rollout.trajectory, config.hp)
    args = (state.params, state.algo_state, batch, config.hp, jax.random.key(2))
    update = jax.jit(trainer.algorithm.update)
    jax.block_until_ready(update(*args))  # compile and run once
    return update, args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="a config file or bundled config name")
    parser.add_argument("--field", required=True, help="the setting to vary, e.g. cg_iters")
    parser.add_argument("--values", nargs="+", required=True, help="its values, first the base")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parse_with_overrides(parser, argv)
    if args.repeats < 1:
        print("trpo_update.py: --repeats must be at least 1", file=sys.stderr)
        return 2
    try:
        runs = {
            v: compiled_update(args.config, [*args.overrides, f"{args.field}={v}"])
            for v in args.values
        }
    except (ConfigError, OSError) as e:
        print(f"trpo_update.py: {e}", file=sys.stderr)
        return 2
    seconds: dict[str, list[float]] = {v: [] for v in args.values}
    tried = {}
    for _ in range(args.repeats):
        for value, (update, update_args) in runs.items():
            start = time.perf_counter()
            metrics = jax.block_until_ready(update(*update_args))[2]
            seconds[value].append(time.perf_counter() - start)
            tried[value] = float(metrics["trpo/line_search_steps"])
    base = statistics.median(seconds[args.values[0]])
    rows = {
        v: {
            "median_s": statistics.median(s),
            "ratio_to_first": statistics.median(s) / base,
            "seconds": s,
            "line_search_candidates_tried": tried[v],
        }
        for v, s in seconds.items()
    }
    for value, row in rows.items():
        print(
            f"{args.field}={value}: {row['median_s']:.3f} s per update "
            f"({row['ratio_to_first']:.2f}x the first), "
            f"{row['line_search_candidates_tried']:.0f} line-search candidates tried"
        )
    figures = {
        "config": args.config,
        "overrides": args.overrides,
        "field": args.field,
        "device": jax.devices()[0].device_kind,
        "variants": rows,
    }
    publish("trpo_update", figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
