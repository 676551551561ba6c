"""`grpo_lm` runs through the same run module as control: the run folder, seeds, chunks,
interrupt and resume, `train.py eval`, and learning max_digit."""

import json
import signal
from pathlib import Path

import numpy as np
import pytest

import train
from rlax_trpo import run
from rlax_trpo.config import config_from_dict
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment import driver

ROOT = Path(__file__).resolve().parents[1]
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
# 4 iterations of a tiny model from configs/grpo_lm_max_digit.yaml, evaluated every 2.
TINY = [
    "--config",
    str(ROOT / "configs" / "grpo_lm_max_digit.yaml"),
    "--seeds",
    "2",
    "--no-progress",
    "model={num_layers: 1, d_model: 16, num_heads: 2}",
    "num_prompts=8",
    "group_size=4",
    "num_iterations=4",
    "eval_every=2",
    "eval_size=32",
]


def test_config_error_before_any_file(tmp_path, capsys):
    with pytest.raises(ConfigError, match="^hp.kl_beta"):
        config_from_dict({**SMALL, "hp": {"kl_beta": "x"}})
    out = tmp_path / "run"
    assert train.main([*TINY, "hp.kl_beta=x", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: hp.kl_beta")
    assert not out.exists()


class _AlreadySignalled(driver.StopRequest):
    """As if SIGTERM had arrived before the first chunk finished."""

    def __enter__(self):
        self.signum = signal.SIGTERM
        return self


def test_lm_run_folder_chunks_resume_and_eval(tmp_path, capsys, monkeypatch):
    whole = tmp_path / "whole"
    assert train.main([*TINY, "--out", str(whole)]) == 0
    printed = capsys.readouterr().out
    assert "greedy accuracy on 32 held-out prompts" in printed and str(whole) in printed
    for name in ("config.yaml", "metrics.csv", "summary.json", "learning_curve.png"):
        assert (whole / name).is_file(), name
    assert (whole / "checkpoint" / "LATEST").is_file()
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["num_seeds"] == 2 and summary["algorithm"] == "grpo_lm"
    for key in ("final_accuracy", "initial_accuracy", "wall_seconds"):
        assert np.isfinite(summary[key]), key
    rows = (whole / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2 * 4 and "eval/greedy_accuracy" in rows[0]

    # Interrupted after its first call (1 iteration), then resumed: the same metrics, bit for
    # bit; the interrupted run's summary.json says so.
    parts = tmp_path / "parts"
    with monkeypatch.context() as m:
        m.setattr(driver, "StopRequest", _AlreadySignalled)
        code = train.main([*TINY, "--chunk-iterations", "2", "--out", str(parts)])
    assert code == 128 + signal.SIGTERM
    assert json.loads((parts / "summary.json").read_text())["status"] == "interrupted"
    assert train.main(["--resume", str(parts), "--no-progress"]) == 0
    assert (parts / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()

    capsys.readouterr()
    assert train.main(["eval", "--run", str(parts)]) == 0
    out = capsys.readouterr().out
    final = json.loads((parts / "summary.json").read_text())["final_accuracy_per_seed"]
    assert f"per seed {final[0]:.3f}, {final[1]:.3f}" in out


def test_grpo_from_scratch_learns_max_digit(tmp_path):
    result = run(config_from_dict(SMALL), seeds=2, out=tmp_path / "run", progress=False)
    summary = result.summary
    assert summary["num_seeds"] == 2 and summary["task"] == "max_digit"
    # Always answering "9" scores 1 - 0.9**3 = 0.27; a random policy about 1/14 * 1/14.
    # A broken update (wrong sign, advantages lost) stays far below 0.8.
    assert summary["initial_accuracy"] < 0.2
    assert min(summary["final_accuracy_per_seed"]) >= 0.8, summary["final_accuracy_per_seed"]
    assert np.isfinite(summary["sampled_tokens_per_second"])


def _tiny_lm(task, warm_start_steps):
    return config_from_dict(
        {
            "algorithm": "grpo_lm",
            "task": task,
            "model": {"num_layers": 1, "d_model": 16, "num_heads": 2},
            "num_prompts": 8,
            "group_size": 4,
            "num_iterations": 2,
            "warm_start_steps": warm_start_steps,
            "warm_start_batch_size": 32,
            "eval_size": 16,
            "hp": {"warm_start_learning_rate": 3e-3},
        }
    )


@pytest.mark.parametrize("task", ["sort", "add"])
def test_the_warm_start_learns_and_becomes_the_reference_policy(task):
    import jax

    from rlax_trpo.lm.model import Transformer, init_params
    from rlax_trpo.lm.program import make_lm_program
    from rlax_trpo.lm.sft import warm_start

    cfg = _tiny_lm(task, 40)
    program = make_lm_program(cfg)

    # The reference warm start is computed in the same program as `init`: Adam's first steps
    # are about sign(gradient) x learning rate, so a gradient that is zero up to rounding
    # turns a last-bit difference between two compilations into a different trajectory.
    @jax.jit
    def init_and_reference(key):
        state = program.init(key, program.hparams)
        k_init, k_warm, _ = jax.random.split(key, 3)
        start = init_params(Transformer(cfg.model_cfg()), k_init)
        warmed, losses = warm_start(
            cfg.model_cfg(), cfg.make_task(), start, k_warm, program.hparams, 40, 32
        )
        return state, start, warmed, losses

    state, start, warmed, losses = init_and_reference(jax.random.key(0))
    leaves = lambda t: [np.asarray(x) for x in jax.tree.leaves(t)]
    # pi_ref and the policy GRPO starts from are both the warm-started parameters.
    for ref, pol, w in zip(
        leaves(state.grpo.ref_params), leaves(state.grpo.params), leaves(warmed), strict=True
    ):
        np.testing.assert_allclose(ref, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(ref, pol)
    assert any((a != b).any() for a, b in zip(leaves(warmed), leaves(start), strict=True))
    losses = np.asarray(losses)
    assert losses[-5:].mean() < 0.7 * losses[:5].mean(), losses  # supervised learning works
    assert float(state.warm_start_loss) == pytest.approx(float(losses[-1]), rel=1e-4)


def test_a_language_model_run_sweeps_its_own_hyperparameters(tmp_path, capsys):
    """`--sweep` over an LM config's `hp:` works like a control sweep; a control-only
    hyperparameter is refused naming the LM's own."""
    out = tmp_path / "sweep"
    argv = [*TINY[2:], "--config", "grpo_lm_max_digit", "--sweep", "hp.learning_rate=1e-3,3e-3"]
    assert train.main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_settings"] == 2 and summary["population"] == 4
    assert summary["swept"] == {"hp.learning_rate": [1e-3, 3e-3]}
    bad = [*TINY, "--sweep", "hp.gae_lambda=0.9,0.95", "--out", str(tmp_path / "bad")]
    assert train.main(bad) == 2
    err = capsys.readouterr().err
    assert "--sweep hp.gae_lambda: not a hyperparameter of grpo_lm; allowed:" in err
    assert "hp.learning_rate" in err and not (tmp_path / "bad").exists()
