"""Executes notebooks/grpo_language_model.ipynb at its small CI budget (RLAX_TRPO_SMALL=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "grpo_language_model.ipynb"


@pytest.mark.slow
def test_language_model_notebook_runs_small(monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("RLAX_TRPO_SMALL", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout
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
    assert "max_digit: greedy accuracy" in text
    assert text.count("add / ") == 3  # one line per loss aggregation
    assert "partial_credit=0.5" in text
