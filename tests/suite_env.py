"""The environment variables the test suite sets before JAX is imported (JAX reads its own
`JAX_...` settings when it is imported): conftest.py applies them in every test process, and
tests/mutants.py before it starts the processes that import JAX once and fork a child per
mutant, so that a child's JAX is configured as a fresh process's would be."""

from __future__ import annotations

import os
import tempfile
from collections.abc import MutableMapping
from pathlib import Path


def set_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """The suite's defaults, where the caller has not set the variable.

    One persistent XLA compilation cache for the whole test run: the xdist workers, the
    train.py processes the tests start, notebook kernels and tests/mutants.py's copies all
    inherit this environment, so a program that several tests compile (the same config, env
    and shapes) is compiled once and then read back (tests/test_trpo.py alone: 98 s cold, 34 s
    warm). The key is the program itself (HLO without source locations), compile options, XLA
    flags and the jax version, so changed code, a mutant included, never reads another
    program's executable. Set JAX_COMPILATION_CACHE_DIR yourself to choose the folder, or to
    "" to turn it off."""
    environ.setdefault("RLAX_TRPO_SMALL", "1")
    cache = Path(tempfile.gettempdir()) / f"rlax-trpo-tests-jax-cache-{os.getuid()}"
    environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(cache))
    environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
