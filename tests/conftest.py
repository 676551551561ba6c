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


def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup` (pytest-xdist) tests spread over the workers one by one,
    except that a file with a module-scoped fixture (one expensive run several tests read)
    stays on one worker, so the fixture is built once."""
    import pytest

    shared: dict[Path, bool] = {}
    for item in items:
        path = item.path
        if path not in shared:
            text = path.read_text()
            shared[path] = 'scope="module"' in text or 'scope="session"' in text
        if shared[path]:
            item.add_marker(pytest.mark.xdist_group(path.stem))
