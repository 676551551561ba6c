#!/usr/bin/env python
"""Minibatch shuffle cost: `rlax_trpo.shuffle.permutation` next to `jax.random.permutation`.

Both are timed in the same run, inside one compiled `lax.scan` of many permutations (as in
training), for each size given. One JSON object per size, microseconds per permutation.

    python benchmarks/shuffle.py                     # sizes 256 512 1024 2048 4096
    python benchmarks/shuffle.py --sizes 512 --iters 5000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import jax.numpy as jnp

from rlax_trpo import shuffle


def time_per_call(fn, n: int, iters: int, repeats: int) -> float:
    def run(key):
        def body(acc, k):
            perm = fn(k, n)
            return acc + (perm * jnp.arange(n)).sum(), None  # consume it: nothing is dead code

        return jax.lax.scan(body, jnp.int32(0), jax.random.split(key, iters))[0]

    compiled = jax.jit(run).lower(jax.random.key(0)).compile()
    jax.block_until_ready(compiled(jax.random.key(0)))
    best = float("inf")
    for r in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.key(r)))
        best = min(best, time.perf_counter() - start)
    return best / iters * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for n in args.sizes:
        ours = time_per_call(shuffle.permutation, n, args.iters, args.repeats)
        ref = time_per_call(jax.random.permutation, n, args.iters, args.repeats)
        row = {
            "n": n,
            "rounds": shuffle.packed_rounds(n) if n <= shuffle.MAX_PACKED else None,
            "shuffle_permutation_us": round(ours, 2),
            "jax_random_permutation_us": round(ref, 2),
            "speedup": round(ref / ours, 2),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
