"""Every notebook executes top to bottom at its small budget (RLAX_TRPO_SMALL=1).

Each notebook prints what it measured; the expected lines below make sure the run did the
work it shows, not just that no cell raised.
"""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]

# notebook -> (substring, minimum count) pairs its outputs must contain
EXPECTED = {
    "quickstart.ipynb": [("final return per seed", 1), ("lr 1e-03", 1)],
    "trpo_anatomy.ipynb": [
        ("small run", 1),
        ("angle(g, F^-1 g)", 1),
        ("vpg ", 1),
        ("npg ", 1),
        ("trpo ", 1),
        ("ppo ", 1),
    ],
    "grpo_group_size.ipynb": [("small run", 1), ("MaxDigit-qa", 4)],
    "grpo_language_model.ipynb": [
        ("small run", 1),
        ("max_digit: greedy accuracy", 1),
        ("add / ", 3),
        ("partial_credit=0.5", 1),
    ],
    "sweeps.ipynb": [("IQM", 1), ("95% CI", 1)],
}


def test_every_notebook_is_covered():
    assert sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")) == sorted(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_executes(name, monkeypatch):
    monkeypatch.setenv("RLAX_TRPO_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout
    path = ROOT / "notebooks" / name
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    text = "".join(o.get("text", "") for o in outputs)
    for needle, count in EXPECTED[name]:
        assert text.count(needle) >= count, (name, needle)
