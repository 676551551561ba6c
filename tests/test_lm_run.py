"""The `grpo_lm` entry point: validates before writing, learns max_digit, writes the run folder."""

import json

import numpy as np
import pytest

from rlax_trpo.errors import ConfigError
from rlax_trpo.lm.run import main

SMALL = {
    "algorithm": "grpo_lm",
    "task": "max_digit",
    "num_digits": 3,
    "model": {"num_layers": 1, "d_model": 32, "num_heads": 2},
    "num_prompts": 16,
    "group_size": 16,
    "num_iterations": 120,
    "eval_every": 60,
    "eval_size": 1000,
    "hp": {"learning_rate": 2e-3, "kl_beta": 0.04},
}


def test_config_error_before_any_file(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="^hp.kl_beta"):
        main({**SMALL, "hp": {"kl_beta": "x"}}, out, progress=False)
    assert not out.exists()


def test_grpo_from_scratch_learns_max_digit_and_writes_run(tmp_path):
    out = tmp_path / "run"
    summary = main(SMALL, out, seeds=2, progress=False)
    for name in ("config.yaml", "metrics.csv", "summary.json", "learning_curve.png"):
        assert (out / name).is_file(), name
    assert (out / "checkpoint" / "params.msgpack").stat().st_size > 1000
    assert json.loads((out / "summary.json").read_text())["final_accuracy"] == pytest.approx(
        summary["final_accuracy"]
    )
    rows = (out / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2 * 120  # header + a row per seed x iteration
    assert summary["num_seeds"] == 2 and summary["task"] == "max_digit"
    # Always answering "9" scores 1 - 0.9**3 = 0.27; a random policy about 1/14 * 1/14.
    # A broken update (wrong sign, advantages lost, padding leaking) stays far below 0.8.
    assert summary["initial_accuracy"] < 0.2
    assert min(summary["final_accuracy_per_seed"]) >= 0.8, summary["final_accuracy_per_seed"]
    assert np.isfinite(summary["sampled_tokens_per_second"])
