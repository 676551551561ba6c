"""Host-side setup that call sites apply before JAX starts its backend.

Nothing here runs at import; `train.py`, the tests, the benchmarks and the notebooks call
`apply_cpu_workarounds()` first thing.

jaxlib 0.10's CPU runtime can deadlock: every thread parked, the run never finishes. We
reproduced it in vmapped training programs on a 2-core CPU:
`jax.jit(jax.vmap(train))` over 2 seeds of a 3-iteration PPO CartPole run hung in 4 of 6
fresh processes, PPO on Breakout-MinAtar with 2 seeds in every try, and it happened with and
without XLA's concurrency-optimised scheduler, with XNNPACK/YNNPACK fusions off and with
Eigen's multi-threading off. It did not happen with the intra-op thread pool reduced to
one thread (0 of 14 tiny runs on a quiet machine; one of 7 more, run while other heavy
jobs shared the CPU, hit its 60 s timeout; 2-seed Breakout finished in 80 s). XLA sizes
that pool from the CPUs the process may run on when the backend starts, so
`apply_cpu_workarounds` starts the backend while the process is pinned to one CPU and then
restores the affinity. Independent thunks no longer run side by side, which cost nothing
measurable here (PPO CartPole at PureJaxRL's settings ran faster: the pool's hand-offs cost
more than they gained on these tiny kernels), but XLA's compiler then also runs on one
thread: compile times grow by about 60%. `RLAX_TRPO_CPU_POOL=all` skips it.

`apply_cpu_workarounds` also makes the CPU lower JAX's threefry hash straight-line
(`unroll_threefry_on_cpu`): jax lowers it on CPU, and only there, as a `fori_loop` of five
rounds to save compile time, and inside a vmapped environment step (every gymnax reset draws
a random start state) that loop runs with loop-carried copies, about 100 tiny kernels per
draw, 128 draws per PPO iteration. Straight-line, XLA fuses the hash into one kernel; the
bits are identical (the same uint32 arithmetic), PPO CartPole at PureJaxRL's settings ran
about 6% faster (best of 2, three alternating pairs: 136-137k vs 143-146k env steps/s) and
compiled slightly faster. `RLAX_TRPO_THREEFRY=rolled` keeps jax's lowering.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

OPT_OUT = "RLAX_TRPO_CPU_POOL"
THREEFRY_OPT_OUT = "RLAX_TRPO_THREEFRY"


def apply_cpu_workarounds(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Start JAX's backends with a one-thread CPU intra-op pool (see the module docstring).

    Must run before JAX initialises its backend (before the first computation, `jax.devices`
    included); afterwards it changes nothing. Returns whether the pool was restricted.
    Also applies `unroll_threefry_on_cpu` (unless `RLAX_TRPO_THREEFRY=rolled`).
    """
    if environ.get(THREEFRY_OPT_OUT, "").lower() != "rolled":
        unroll_threefry_on_cpu()
    if environ.get(OPT_OUT, "").lower() == "all":
        return False
    if not hasattr(os, "sched_getaffinity"):  # not Linux: leave XLA as it is
        return False
    import jax  # deferred: importing this module must not import (or start) JAX

    if _backends_started():
        return False
    cpus = os.sched_getaffinity(0)
    if len(cpus) <= 1:
        return False
    try:
        os.sched_setaffinity(0, {min(cpus)})
    except OSError:  # not permitted here (some sandboxes): leave XLA as it is
        return False
    try:
        jax.devices()  # creates the clients, and with them the intra-op thread pool
    finally:
        _restore_affinity(cpus)
    return True


def _restore_affinity(cpus: set[int]) -> None:
    """Give every thread of the process `cpus` again: threads started while the process was
    pinned (XLA's pool among them) inherited the one-CPU mask, and the process-level call
    only changes the calling thread."""
    os.sched_setaffinity(0, cpus)
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread has exited meanwhile
            pass


def _backends_started() -> bool:
    try:  # jax has no public query for this; without it the pinning is merely redundant
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return False


def unroll_threefry_on_cpu() -> bool:
    """Lower `threefry2x32` on CPU as jax does on GPU: straight-line, no `fori_loop`.

    Affects programs compiled afterwards; the random bits are the same either way. Uses
    jax's private lowering table (there is no public switch); returns False and changes
    nothing where that is not as expected.
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry
    except ImportError:
        return False
    rule = getattr(threefry, "_threefry2x32_lowering_rule", None)
    primitive = getattr(threefry, "threefry2x32_p", None)
    if rule is None or primitive is None:
        return False
    mlir.register_lowering(primitive, rule, platform="cpu")
    return True
