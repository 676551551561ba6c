"""The published results tables (README.md's and docs/results.md's MinAtar, Craftax and
bundled-configuration tables) are what `python tools/results_tables.py` writes from the
committed JSON, number for number."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import results_tables  # noqa: E402


@pytest.fixture(scope="module")
def made():
    from test_aggregate import RLIABLE_PROBLEM

    if RLIABLE_PROBLEM is not None:
        pytest.skip(f"rliable cannot be imported: {RLIABLE_PROBLEM}")
    return {name: make() for name, make in results_tables.TABLES.items()}


@pytest.mark.parametrize("page", sorted(results_tables.PAGES))
def test_each_page_holds_the_tables_its_results_give(page, made):
    text = (ROOT / page).read_text()
    assert results_tables.rewritten(page, text, made) == text, (
        f"{page}: its tables differ from the results; run python tools/results_tables.py"
    )


def test_a_changed_digit_is_found(made):
    page = "README.md"
    text = (ROOT / page).read_text()
    row = next(line for line in made["minatar"].splitlines() if line.startswith("| Breakout"))
    changed = row.replace("[", "[1", 1)
    assert changed != row and row in text
    assert results_tables.rewritten(page, text.replace(row, changed), made) == text


def test_the_minatar_table_names_its_intervals_and_seeds(made):
    header = made["minatar"].splitlines()[0]
    # 4 seeds: the IQM's 95% bootstrap interval is their range, and the header says so
    assert "PPO IQM [range], 4 seeds" in header and "95% CI" not in header
    assert "Seeds: PPO " in made["minatar"]


def test_a_page_without_its_block_is_one_line_and_nothing_written(
    tmp_path, made, monkeypatch, capsys
):
    with pytest.raises(ValueError, match="README.md: no <!-- table:minatar -->"):
        results_tables.rewritten("README.md", "no table here\n", made)
    monkeypatch.setattr(results_tables, "TABLES", {k: (lambda v=v: v) for k, v in made.items()})
    monkeypatch.setattr(results_tables, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("no table here\n")
    (tmp_path / "docs" / "results.md").write_text((ROOT / "docs" / "results.md").read_text())
    assert results_tables.main([]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    # neither page was written: the one that had its blocks is as it was
    assert (tmp_path / "docs" / "results.md").read_text() == (ROOT / "docs/results.md").read_text()
    assert (tmp_path / "README.md").read_text() == "no table here\n"


def test_the_bundled_table_has_a_row_for_every_row_of_its_script(made):
    """Every row `benchmarks/bundled_table.py` runs has its file, and the table shows it with
    the seeds it ran on (1000 and up) and the command's config."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bt", ROOT / "benchmarks/bundled_table.py")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    files = {p.stem for p in (ROOT / results_tables.BUNDLED).glob("*.json")}
    assert files == {row[0] for row in script.ROWS}
    lines = [line for line in made["bundled"].splitlines() if line.startswith("| ")][1:]
    assert len(lines) == len(script.ROWS)
    for line, (_, config, seeds, overrides, what) in zip(lines, script.ROWS, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == what and cells[2] == f"`{' '.join([config, *overrides])}`", line
        assert cells[4] == f"{seeds} (1000-{1000 + seeds - 1})", line
