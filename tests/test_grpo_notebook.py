"""Executes notebooks/grpo_group_size.ipynb at its small CI budget (RLAX_TRPO_SMALL=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "grpo_group_size.ipynb"


@pytest.mark.slow
def test_group_size_notebook_runs_small(monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("RLAX_TRPO_SMALL", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOK.parent}}
    )
    client.execute()
    text = "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    assert "small run" in text
    assert text.count("MaxDigit-qa") >= 4  # every setting of the small grid printed a line
    assert os.environ.get("RLAX_TRPO_SMALL") == "1"
