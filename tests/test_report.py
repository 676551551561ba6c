"""The printed summary of a run (figures to three significant digits, never `-0.0`; a note when
seeds are too few for an interval) and its plots (the summary's statistic, named, with a band
inside the data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlax_trpo.config.sweep import NO_SWEEP
from rlax_trpo.report import stats
from rlax_trpo.report.run_files import format_summary, plot_curves, return_summary
from rlax_trpo.report.stats import iqm


def _summary(**figures) -> dict:
    return {
        "algorithm": "grpo",
        "env": "MaxDigit-qa",
        "num_seeds": 4,
        "total_env_steps": 409_600,
        "wall_seconds": 12.0,
        "compile_seconds": 3.0,
        "env_steps_per_second": 1e5,
        **figures,
    }


@pytest.mark.parametrize(
    "value, text",
    [(0.973, "0.973"), (0.002, "0.002"), (475.34, "475"), (12.47, "12.5"), (0.970, "0.97"),
     (-93.71, "-93.7"), (123456.7, "123457"), (0.0, "0"), (-0.0, "0"), (-0.0004, "-0.0004"),
     (2.5e7, "2.5e+07")],
)  # fmt: skip
def test_sig_keeps_three_significant_digits(value, text):
    from rlax_trpo.report.run_files import sig

    assert sig(value) == text


def test_headline_of_a_bandit_shows_its_digits():
    summary = _summary(final_return_mean=0.973, final_return_std=0.002, eval_return_mean=-0.0)
    text = format_summary(summary, Path("runs/x"))
    assert "0.973 +- 0.002" in text
    assert "greedy evaluation return: 0\n" in text
    assert "-0.0" not in text and "1.0 +- 0.0" not in text


def _runs(seeds: int, iterations: int = 60, seed: int = 0) -> np.ndarray:
    """Returns that climb to CartPole's 500 ceiling, most seeds at it, some far below."""
    rng = np.random.default_rng(seed)
    steps = np.minimum(500.0, np.linspace(10, 700, iterations))
    runs = np.stack([steps * rng.uniform(0.3, 1.0) if s % 3 == 0 else steps for s in range(seeds)])
    runs[:, :3] = np.nan  # no episode finished yet
    return runs


def _bands(fig) -> list[np.ndarray]:
    (ax,) = fig.axes
    return [np.concatenate([p.vertices for p in c.get_paths()]) for c in ax.collections]


@pytest.mark.parametrize("seeds", [3, 4, 8])
def test_plot_band_stays_inside_the_data_and_the_legend_names_the_statistic(tmp_path, seeds):
    runs = _runs(seeds)
    fig = plot_curves(tmp_path / "c.png", {"episode/return": runs}, 100, "ppo on CartPole-v1")
    assert (tmp_path / "c.png").stat().st_size > 0
    (band,) = _bands(fig)
    assert band[:, 1].max() <= np.nanmax(runs) == 500.0  # the old mean + std band went above
    assert band[:, 1].min() >= np.nanmin(runs)
    (ax,) = fig.axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    if seeds >= 5:
        assert legend == [
            f"episode/return: IQM of {seeds} seeds",
            f"shaded: 95% bootstrap CI ({seeds} seeds)",
        ]
        assert "IQM over seeds" in ax.get_ylabel()
    elif seeds == 4:  # the IQM, and its bootstrap band is the range: called so
        assert legend == ["episode/return: IQM of 4 seeds", "shaded: range (min to max, 4 seeds)"]
        _, low, high, _, _ = stats.curve_statistic(runs)
        np.testing.assert_allclose(low[3:], np.min(runs[:, 3:], 0))
        np.testing.assert_allclose(high[3:], np.max(runs[:, 3:], 0))
    else:
        assert legend == ["episode/return: mean of 3 seeds", "shaded: range (min to max, 3 seeds)"]
        assert "mean over seeds" in ax.get_ylabel()
    (line,) = ax.get_lines()
    centre = line.get_ydata()
    assert np.isnan(centre[:3]).all()
    expected = iqm(runs[:, 3:].T) if seeds >= 4 else runs[:, 3:].mean(0)
    np.testing.assert_allclose(centre[3:], expected)


def test_plot_band_is_inside_each_iterations_range(tmp_path):
    runs = _runs(8, seed=1)
    low, high = stats.curve_statistic(runs)[1:3]
    ok = np.isfinite(runs).all(0)
    assert (low[ok] >= np.min(runs[:, ok], 0) - 1e-9).all()
    assert (high[ok] <= np.max(runs[:, ok], 0) + 1e-9).all()
    assert (high[ok] > low[ok]).any()


def test_smoothing_averages_each_seed_and_says_so(tmp_path):
    runs = _runs(8)
    smoothed = stats.smooth_curves(runs, 5)
    np.testing.assert_allclose(smoothed[:, 10], runs[:, 6:11].mean(1))
    np.testing.assert_allclose(smoothed[:, 4], runs[:, 3:5].mean(1))  # NaNs left out
    fig = plot_curves(tmp_path / "s.png", {"r": runs}, 100, "t", smooth=5)
    (ax,) = fig.axes
    assert "5-iteration average" in ax.get_ylabel()
    (band,) = _bands(fig)
    assert np.nanmin(runs) <= band[:, 1].min() and band[:, 1].max() <= np.nanmax(runs)


@pytest.mark.parametrize("seeds", [3, 4, 5])
def test_summary_says_when_seeds_are_too_few_for_an_interval(seeds):
    finals = np.array([450.0, 480.0, 500.0, 490.0, 470.0][:seeds])
    its = 10
    metrics = {
        "episode/return_sum": np.repeat(finals[:, None], its, 1),
        "episode/count": np.ones((seeds, its)),
    }
    summary = return_summary(metrics, np.full((seeds, 2), 500.0), NO_SWEEP, seeds)
    note = summary["interval_note"]
    assert summary["members"][0]["interval_note"] == note
    text = format_summary({**_summary(num_seeds=seeds), **summary}, Path("runs/x"))
    if seeds == 3:
        assert note.startswith("3 seed(s) are too few for an IQM or a 95% bootstrap interval")
        assert summary["members"][0]["final_return_iqm_ci95"] == [450.0, 500.0]  # the range
        assert f"note: {note}" in text
    elif seeds == 4:  # an IQM, but its 95% bootstrap interval is the range: said so
        assert note.startswith("4 seeds: the 95% bootstrap interval of an IQM of 4 values is")
        assert summary["members"][0]["final_return_iqm_ci95"] == [450.0, 500.0]
        assert f"note: {note}" in text
    else:
        assert note is None and "note:" not in text
        low, high = summary["members"][0]["final_return_iqm_ci95"]
        assert 450.0 < low < high < 500.0  # inside the range: a confidence interval


def test_a_single_seed_curve_says_what_it_plots_in_words(tmp_path, monkeypatch):
    """One seed: its value, no band; the axis names the metric in words (`episode return`,
    not the key `episode/return`) and says it is one seed, as the learning curve's line."""
    from rlax_trpo.report import run_files

    fig = plot_curves(tmp_path / "one.png", {"episode return": _runs(1)}, 100, "ppo")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "episode return, one seed"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["episode return: 1 seed"]
    assert _bands(fig) == []
    drawn = []
    monkeypatch.setattr(run_files, "plot_curves", lambda *a: drawn.append(a))
    metrics = {"episode/return": _runs(1), "episode/count": np.ones((1, 60))}
    summary = {"num_seeds": 1, "algorithm": "ppo", "env": "CartPole-v1"}
    run_files.write_run_files(tmp_path, metrics, summary, NO_SWEEP, 100)
    ((_, curves, _, _, ylabel, _),) = drawn
    assert list(curves) == ["episode return"] and ylabel == "episode/return"
    assert run_files.metric_label(ylabel) == "episode return"
