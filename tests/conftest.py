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


# The suite runs with pytest-xdist, one worker per core, each file on one worker
# (`--dist loadfile`). The files that take longest go first, so that at the end the workers
# are finishing short files together rather than one waiting on a long one (xdist would
# otherwise order files by their number of tests, which sends these to the end).
LONGEST_FIRST = (
    "test_notebooks.py", "test_devices.py", "test_memory.py", "test_env_suites.py",
    "test_lm_run.py", "test_extending.py", "test_resume.py", "test_faults.py",
    "test_platform.py", "test_ppo.py", "test_multihost.py", "test_packaging.py",
)  # fmt: skip


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    order = {item: i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), order[item]))
