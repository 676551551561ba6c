"""Execute notebooks/trpo_anatomy.ipynb at a small budget (RLAX_TRPO_SMALL=1)."""

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "trpo_anatomy.ipynb"


@pytest.mark.slow
def test_trpo_anatomy_notebook_executes(monkeypatch):
    monkeypatch.setenv("RLAX_TRPO_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "small run" in outputs
    assert "angle(g, F^-1 g)" in outputs
    for algo in ("vpg", "npg", "trpo", "ppo"):
        assert f"{algo} " in outputs
    assert os.environ["RLAX_TRPO_SMALL"] == "1"
