#!/usr/bin/env python
"""Where a trained policy is stochastic: its entropy per state, grouped by where an object is.

For each member of a run folder it plays the sampling policy in `--envs` environments for
`--steps` steps and prints, per row of the image channel `--channel` (MinAtar Breakout's
ball by default: channel 1; its paddle is on row 9; `--image` reads flattened observations as
rows x columns x channels), the mean entropy of pi(.|s) in nats,
the share of states below `--below` nats, and the number of states. A policy whose mean
entropy is high can still be deterministic exactly where its actions matter; a mean over
the batch (what `metrics.csv`'s `policy/entropy` shows) does not say where.

    python benchmarks/entropy_by_state.py runs/trpo_breakout --members 4
    python benchmarks/entropy_by_state.py runs/tiny --train trpo_minatar total_env_steps=16384

With `--train CONFIG key=value ...` it first trains that configuration into the run folder.
Needs image observations (flattened or not) and a policy with an entropy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlax_trpo.platform import setup_cpu

setup_cpu()

import jax
import numpy as np
from _publish import run_folder

import rlax_trpo
from rlax_trpo.rollout import batched_step, reset_envs


def entropy_by_row(policy, envs, steps, image, channel, below, key) -> dict:
    """The sampling policy's per-state entropy over `steps` x `envs` states, by the row of
    `channel` (-1: the channel is empty in that state); observations are read as `image`
    (rows, columns, channels; -1 for one of them), as a flattened one is."""
    env = policy.env
    step = batched_step(env, envs)
    obs, state = reset_envs(env, key, envs)

    def body(carry, k):
        obs, state = carry
        dist = policy.networks.policy(policy.state.params.policy, policy.observe(obs))
        k_act, k_env = jax.random.split(k)
        res = step(k_env, state, dist.sample(seed=k_act))
        return (res.obs, res.state), (obs, dist.entropy())

    scan = jax.jit(lambda c, ks: jax.lax.scan(body, c, ks)[1])
    observations, entropy = scan((obs, state), jax.random.split(key, steps))
    observations = np.asarray(observations).reshape(steps * envs, -1)
    known = abs(int(np.prod(image)))
    if observations.shape[1] % known:
        raise SystemExit(f"entropy_by_state: {env.name}'s observations are not {image} images")
    image = tuple(observations.shape[1] // known if n == -1 else n for n in image)
    grid = observations.reshape((-1, *image))[..., channel]
    entropy = np.asarray(entropy).reshape(-1)
    present = grid.reshape(len(grid), -1).max(1) > 0
    rows = np.where(present, grid.max(2).argmax(1), -1)
    table = {}
    for row in np.unique(rows):
        h = entropy[rows == row]
        table[int(row)] = {
            "mean_entropy": round(float(h.mean()), 4),
            f"share_below_{below:g}": round(float((h < below).mean()), 4),
            "states": int(h.size),
        }
    return {
        "mean_entropy": round(float(entropy.mean()), 4),
        f"share_below_{below:g}": round(float((entropy < below).mean()), 4),
        "by_row": table,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a run folder")
    p.add_argument("--members", type=int, default=1, help="members 0..N-1 of the run")
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--image", default="10,10,-1", help="rows,columns,channels (MinAtar's)")
    p.add_argument("--channel", type=int, default=1, help="image channel located by row")
    p.add_argument("--below", type=float, default=0.05, help="nats: a nearly deterministic state")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", type=Path)
    p.add_argument("--train", nargs="+", metavar="CONFIG key=value", help="train this first")
    args = p.parse_args(argv)
    if not run_folder("entropy_by_state", args.run, args.train):
        return 2
    image = tuple(int(n) for n in args.image.split(","))
    out = {"run": str(args.run), "channel": args.channel, "envs": args.envs,
           "steps": args.steps, "members": {}}  # fmt: skip
    for member in range(args.members):
        policy = rlax_trpo.load_policy(args.run, member=member)
        key = jax.random.key(args.seed)
        out["members"][member] = entropy_by_row(
            policy, args.envs, args.steps, image, args.channel, args.below, key
        )
        print(json.dumps({"member": member, **out["members"][member]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
