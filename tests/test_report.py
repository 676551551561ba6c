"""The printed summary of a run: figures to three significant digits, never `-0.0`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlax_trpo.report import format_summary


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
    from rlax_trpo.report import sig

    assert sig(value) == text


def test_headline_of_a_bandit_shows_its_digits():
    summary = _summary(final_return_mean=0.973, final_return_std=0.002, eval_return_mean=-0.0)
    text = format_summary(summary, Path("runs/x"))
    assert "0.973 +- 0.002" in text
    assert "greedy evaluation return: 0\n" in text
    assert "-0.0" not in text and "1.0 +- 0.0" not in text
