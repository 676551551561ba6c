"""Every ```python block of README.md runs as printed, in a fresh Python process, in order,
in one empty folder, as a reader pasting them in turn would (the trained-policy block loads
the run folder that the `run(...)` block writes). The processes inherit this test run's
environment (conftest.py's compilation cache) except the suite's fast-compile XLA flags: they
compile as a reader's Python does. The blocks run far longer than they compile, and run about
twice as fast with XLA's default code generation (block 0: 35 s against 69 s cold on a 2-core
CPU). Each block is sized to finish in about a minute on a 2-core CPU, which the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

ROOT = Path(__file__).resolve().parents[1]
READER_ENV = {**os.environ, "XLA_FLAGS": conftest.USER_XLA_FLAGS}
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 4
    assert any("jax.vmap(train" in block for block in BLOCKS), "vmapped seeds"
    assert any("jax.vmap(jax.vmap(train" in block for block in BLOCKS), "a sweep"
    assert any("load_policy(" in block for block in BLOCKS), "a trained policy"


class Reader:
    """Runs the README's blocks in one folder, each once, every earlier block first."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.done: dict[int, subprocess.CompletedProcess] = {}

    def through(self, index: int) -> subprocess.CompletedProcess:
        for i in range(index + 1):
            if i not in self.done:
                script = self.folder / f"readme_block_{i}.py"
                script.write_text(BLOCKS[i])
                self.done[i] = subprocess.run(
                    [sys.executable, script.name], cwd=self.folder, env=READER_ENV,
                    capture_output=True, text=True, timeout=600,
                )  # fmt: skip
        return self.done[index]


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Reader:
    return Reader(tmp_path_factory.mktemp("readme"))


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_python_block_runs_as_printed(index, reader):
    proc = reader.through(index)
    assert proc.returncode == 0, f"README block {index}:\n{BLOCKS[index]}\n{proc.stderr[-3000:]}"
    if "load_policy(" in BLOCKS[index]:
        assert "greedy episode return" in proc.stdout
