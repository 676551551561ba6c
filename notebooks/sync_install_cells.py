"""Write every notebook's "Open in Colab" link and install cell from pyproject's repository URL.

    python notebooks/sync_install_cells.py          # rewrite the notebooks in place
    python notebooks/sync_install_cells.py --check  # exit 1 if one differs (tests do this)

The repository's address is written once, in pyproject.toml (`[project.urls] Repository`).
Each notebook's first markdown cell carries a Colab link to itself, and its first code cell
is `install_cell(url)`: it installs the package only where it is not importable yet (a fresh
Colab runtime), keeping jax's GPU plugin consistent with gymnax's `jax < 0.12` bound.
Outputs are left as they are.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
COLAB_LINK = re.compile(r"\[Open in Colab\]\([^)]*\)")

# Which jax to install beside the package, from what the runtime already has. Run in the
# install cell, before anything imports jax; tested on its own (tests/test_notebooks.py).
JAX_PINS = '''\
def jax_pins(version=importlib.metadata.version):
    """gymnax 1.0.1 needs jax < 0.12. A newer jax is replaced, with its CUDA plugin, by the
    newest 0.11 release; an older one is kept."""

    def installed(name):
        try:
            return version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    jax_version = installed("jax")
    if jax_version is None or tuple(map(int, jax_version.split(".")[:2])) < (0, 12):
        return []
    for cuda in ("cuda13", "cuda12"):
        if installed(f"jax-{cuda}-plugin"):
            return [f"jax[{cuda}]<0.12"]  # jax, jaxlib and the plugin move together
    return ["jax<0.12", "jaxlib<0.12"]
'''


def install_cell(url: str) -> str:
    """The first code cell of every notebook."""
    return f'''\
# Colab or a fresh runtime: install rlax_trpo (nothing happens where it is already installed).
import importlib.metadata
import importlib.util
import subprocess
import sys

REPOSITORY = "{url}"


{JAX_PINS}

if importlib.util.find_spec("rlax_trpo") is None:
    pins = jax_pins()
    if pins and "jax" in sys.modules:
        print("jax was imported before this cell: restart the runtime after the install")
    print("installing rlax_trpo", *pins)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *pins,
                    f"rlax_trpo @ git+{{REPOSITORY}}"], check=True)

# Before anything starts JAX: one CPU device per core, so runs shard their seeds over all
# cores (rlax_trpo.platform). Harmless on GPU/TPU.
from rlax_trpo.platform import setup_cpu

setup_cpu()'''


def colab_link(url: str, notebook: str) -> str:
    path = url.removeprefix("https://github.com/").rstrip("/")
    return (
        f"[Open in Colab](https://colab.research.google.com/github/{path}/blob/main/"
        f"notebooks/{notebook})"
    )


def repository_url() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(r'^Repository = "([^"]+)"', text, re.MULTILINE)
    if match is None:
        raise SystemExit("pyproject.toml: no [project.urls] Repository")
    return match.group(1)


def synced(nb: nbformat.NotebookNode, name: str, url: str) -> nbformat.NotebookNode:
    """The notebook with its Colab link and install cell as they should be."""
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    if not COLAB_LINK.search(first_md.source):
        raise SystemExit(f"{name}: the first markdown cell has no [Open in Colab](...) link")
    first_md.source = COLAB_LINK.sub(colab_link(url, name), first_md.source, count=1)
    first_code.source = install_cell(url)
    return nb


def main(argv: list[str]) -> int:
    url, stale = repository_url(), []
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        before = nbformat.writes(nb)
        after = nbformat.writes(synced(nb, path.name, url))
        if before != after:
            stale.append(path.name)
            if "--check" not in argv:
                path.write_text(after + ("" if after.endswith("\n") else "\n"))
    if stale:
        verb = "differ from pyproject's repository URL" if "--check" in argv else "rewritten"
        print(f"{verb}: {', '.join(stale)}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
