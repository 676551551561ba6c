"""notebooks/sweeps.ipynb executes top to bottom at a small budget (RLAX_TRPO_SMALL=1)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

PATH = Path(__file__).resolve().parents[1] / "notebooks" / "sweeps.ipynb"


@pytest.mark.slow
def test_sweeps_notebook_executes(monkeypatch):
    monkeypatch.setenv("RLAX_TRPO_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(PATH, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(PATH.parent)}}
    ).execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, errors[0].get("evalue") if errors else None
    text = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "IQM" in text and "95% CI" in text
