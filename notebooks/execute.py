"""Execute notebooks at their full budget and save them with their outputs, in place.

    python notebooks/execute.py quickstart.ipynb sweeps.ipynb   # or no names: all of them

The committed notebooks carry the outputs of this command (their figures and tables are
visible without running them). The kernel imports this checkout's `rlax_trpo` (its root comes
first on PYTHONPATH), not whatever the Python environment has installed, so the outputs are
this code's. The tests execute them at the small budget (`RLAX_TRPO_SMALL=1`) in memory and
never write them back; tests/test_notebooks.py re-runs quickstart at its full budget and
compares what it prints with the committed outputs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def checkout_first(environ: MutableMapping[str, str] = os.environ) -> None:
    """Put this checkout's root first on PYTHONPATH, for the kernels started afterwards (from
    `notebooks/`, an installed `rlax_trpo`, e.g. an editable install of another checkout,
    would be imported instead)."""
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *rest])


def main(names: list[str]) -> int:
    checkout_first()
    env_small = os.environ.pop("RLAX_TRPO_SMALL", None)
    if env_small:
        print("RLAX_TRPO_SMALL ignored: this saves full-budget outputs")
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend keeps the figures
    for name in names or sorted(p.name for p in HERE.glob("*.ipynb")):
        path = HERE / name
        nb = nbformat.read(path, as_version=4)
        t0 = time.time()
        NotebookClient(nb, timeout=None, kernel_name="python3",
                       resources={"metadata": {"path": str(HERE)}}).execute()  # fmt: skip
        path.write_text(nbformat.writes(nb) + "\n")
        print(f"{name}: executed in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
