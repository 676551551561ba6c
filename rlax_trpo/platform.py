"""Host-side XLA settings that call sites apply before JAX starts its backend.

Nothing here runs at import; `train.py`, the tests and the benchmarks call
`apply_cpu_workarounds()` first thing.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# jaxlib 0.10's CPU backend can deadlock (every thread parked, the run never finishes) in
# some vmapped training programs on this 2-core machine: PPO on Breakout-MinAtar with 2 seeds
# hung every time (1 seed never did), the TRPO notebook's vmapped runs once in the test suite.
# Turning off XLA's concurrency-optimised scheduler removed every hang we reproduced; it costs
# some speed (benchmarks/throughput.py, PPO CartPole at PureJaxRL's settings: 80k instead of
# 86k env steps/s), so it can be switched back on with RLAX_TRPO_FAST_SCHEDULER=1 at the risk
# of a hang.
SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def apply_cpu_workarounds(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Add the scheduler flag to XLA_FLAGS unless the user set it or opted out.

    Must run before JAX initialises its backend (before the first computation). Returns
    whether the flag was added.
    """
    flags = environ.get("XLA_FLAGS", "")
    if environ.get("RLAX_TRPO_FAST_SCHEDULER") == "1":
        return False
    if "xla_cpu_enable_concurrency_optimized_scheduler" in flags:
        return False
    environ["XLA_FLAGS"] = f"{flags} {SCHEDULER_FLAG}".strip()
    return True
