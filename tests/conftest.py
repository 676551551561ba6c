import os
import sys
from pathlib import Path

# Tests import helpers (probe environments) from this folder.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("RLAX_TRPO_SMALL", "1")

# Before any test starts JAX's backend (notebook kernels inherit the environment too).
from rlax_trpo.platform import setup_cpu  # noqa: E402

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax  # noqa: E402

# Start the backend now, so every test in this process sees the same devices (in-process
# `train.main(["--devices", N])` can no longer change the count).
jax.devices()
