#!/usr/bin/env python
"""Hang check on ONE CPU device: fresh processes whose one program holds several batched
linear-algebra calls that can run at the same time.

jaxlib 0.10's batched LAPACK kernels wait on XLA's intra-op thread pool from a thread of
that pool; two such calls running at once can each wait for work queued behind the other,
on one device as on several (docs/upstream/cpu_lapack_deadlock.md). Each process here sets
up the CPU as `rlax-trpo train` does (`rlax_trpo.platform.setup_cpu(1)`: one device) and
runs, under a timeout, one jitted program vmapped over 2 to 8 seeds (the count cycles over
the processes):

- a recurrent actor-critic initialised with flax's own `nn.initializers.orthogonal` (a
  batched QR per layer, independent of each other: the pattern that hangs PureJaxRL's
  `ppo_rnn.py` with 2 vmapped seeds on one device), and
- MuJoCo physics through the library's Playground adapter (`playground/CartpoleBalance`):
  a reset and a step of every environment in the same program, each factorising the mass
  matrices (Cholesky, triangular solves), a few times over in a scan.

A process that outlives `--timeout` counts as a hang (its native stacks are saved with gdb
where gdb is installed, as `benchmarks/stress.py` does). With `--env RLAX_TRPO_LAPACK=keep`
(jaxlib's LAPACK on one device, this library's choice before) the same processes are the
control. Prints one JSON object, and writes it to `--json`.

    python benchmarks/lapack_one_device.py --processes 20
    python benchmarks/lapack_one_device.py --processes 6 --env RLAX_TRPO_LAPACK=keep
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _publish import publish
from stress import run_fresh


def program(seeds: int, envs: int, steps: int) -> float:
    """The mixed program in this process (after the library's CPU setup); a checksum."""
    from rlax_trpo.platform import setup_cpu

    setup_cpu(1)
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from rlax_trpo.envs import make_env

    class ActorCritic(nn.Module):  # flax's own orthogonal initialisers throughout
        @nn.compact
        def __call__(self, x, h):
            dense = lambda n, s: nn.Dense(n, kernel_init=nn.initializers.orthogonal(s))
            x = nn.relu(dense(128, 2**0.5)(x))
            h, x = nn.GRUCell(128)(h, x)
            return dense(1, 0.01)(x), dense(1, 1.0)(nn.relu(dense(64, 2**0.5)(x))), h

    env = make_env("playground/CartpoleBalance")
    obs_dim = env.spec.obs_shape[0]

    def member(key):
        k_init, k_env = jax.random.split(key)
        net = ActorCritic()
        params = net.init(k_init, jnp.zeros((1, obs_dim)), jnp.zeros((1, 128)))
        obs, state = jax.vmap(env.reset)(jax.random.split(k_env, envs))

        def body(carry, key):
            obs, state = carry
            action = jnp.tanh(net.apply(params, obs, jnp.zeros((envs, 128)))[0])
            res = jax.vmap(env.step)(jax.random.split(key, envs), state, action)
            return (res.obs, res.state), res.reward.sum()

        _, rewards = jax.lax.scan(body, (obs, state), jax.random.split(k_env, steps))
        leaves = jax.tree.leaves(params)
        return rewards.sum() + sum(jnp.sum(x) for x in leaves)

    keys = jax.random.split(jax.random.key(0), seeds)
    return float(jax.jit(jax.vmap(member))(keys).sum())


def run_one(seeds: int, extra: dict[str, str], args: argparse.Namespace, stacks: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", str(seeds), "--envs", str(args.envs),
           "--steps", str(args.steps)]  # fmt: skip
    return {"seeds": seeds, **run_fresh(cmd, extra, args.timeout, stacks)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=20)
    p.add_argument("--timeout", type=float, default=180.0, help="seconds before a hang")
    p.add_argument("--envs", type=int, default=16, help="environments per seed")
    p.add_argument("--steps", type=int, default=8, help="physics steps in the scan")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", type=Path)
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(program(args.child, args.envs, args.steps))
        return
    extra = dict(kv.split("=", 1) for kv in args.env)
    scratch = Path(tempfile.mkdtemp(prefix="lapack_one_device_"))  # gdb stacks of hangs
    rows = []
    for i in range(args.processes):
        rows.append(run_one(2 + i % 7, extra, args, scratch / f"process{i}.stacks.txt"))
        print(f"process {i + 1}/{args.processes}: {rows[-1]}", file=sys.stderr, flush=True)
    result = {
        "devices": 1,
        "env": extra,
        "hangs": sum(r["status"] == "hung" for r in rows),
        "failures": sum(r["status"].startswith("failed") for r in rows),
        "rows": rows,
    }
    publish("lapack_one_device", result, args.json)


if __name__ == "__main__":
    main()
