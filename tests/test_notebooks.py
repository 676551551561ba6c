"""Every notebook executes top to bottom at its small budget (RLAX_TRPO_SMALL=1).

Each notebook prints what it measured. For each, the patterns below must match the outputs a
minimum number of times, and every number they capture must be finite (a NaN return or
accuracy fails the test, not only a missing line).
"""

import math
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
N = r"(-?[0-9][0-9.,e+-]*|nan|inf|-inf)"  # a printed number, or what NaN/inf print as

# notebook -> (regex with captured numbers, minimum number of matches)
EXPECTED = {
    "quickstart.ipynb": [
        (rf"final return per seed: \[ *{N} +{N} *\]", 1),
        (rf"lr [0-9]e-0[34]: final return {N}", 3),
        (rf"{N} env steps/s", 1),
    ],
    "trpo_anatomy.ipynb": [
        ("small run", 1),
        (rf"true residual after \d+ iterations: {N}, after 25: {N}", 1),
        (rf"1/2 s\^T F s of the full step = {N} \(max_kl {N}\)", 1),
        (rf"angle\(g, F\^-1 g\) = {N} degrees", 1),
        (rf"(?:vpg |npg |trpo |ppo ) *\d+ seeds x [0-9,]+ steps: final return {N} \+- {N}", 4),
    ],
    "grpo_group_size.ipynb": [
        ("small run", 1),
        (rf"MaxDigit-qa +G= *\d+ \w+ +1/\w+ +final +{N} \+- +{N}", 4),
    ],
    "grpo_language_model.ipynb": [
        ("small run", 1),
        (rf"max_digit: greedy accuracy {N} -> {N}", 1),
        (rf"add / \w+ *: greedy accuracy {N} -> {N}, final sampled length {N}", 3),
        ("partial_credit=0.5", 1),
    ],
    "sweeps.ipynb": [
        (rf"mean +{N} +IQM +{N} +95% CI \[ *{N}, *{N}\]", 3),
        (rf"{N} env steps/s", 1),
    ],
}


def _numbers_are_finite(match: re.Match) -> bool:
    return all(math.isfinite(float(g.replace(",", ""))) for g in match.groups() if g is not None)


def test_the_value_check_catches_nan():
    pattern = EXPECTED["sweeps.ipynb"][0][0]
    good = "lr=0.001: mean  500.0  IQM  500.0  95% CI [ 500.0,  500.0]"
    bad = "lr=0.001: mean    nan  IQM    nan  95% CI [   nan,    nan]"
    assert _numbers_are_finite(re.search(pattern, good))
    assert not _numbers_are_finite(re.search(pattern, bad))


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
    for pattern, count in EXPECTED[name]:
        matches = list(re.finditer(pattern, text))
        assert len(matches) >= count, (name, pattern, text[-3000:])
        bad = [m.group(0) for m in matches if not _numbers_are_finite(m)]
        assert not bad, (name, bad)
