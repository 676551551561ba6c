"""GRPO learning tests: short runs with thresholds that a broken algorithm does not reach."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from rlax_trpo.config import load_config
from rlax_trpo.training import make_trainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _train(path: str, seeds: int = 1, **overrides):
    config = load_config(CONFIGS / path, [f"{k}={v}" for k, v in overrides.items()])
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), seeds)
    _, metrics = jax.jit(jax.vmap(trainer.train, (0, None)))(keys, config.hp)
    return config, jax.tree.map(np.asarray, metrics)


def _late_mean(m, frac=0.25):
    s, c = m["episode/return_sum"], m["episode/count"]
    k = max(1, int(s.shape[-1] * frac))
    return s[:, -k:].sum(-1) / np.maximum(c[:, -k:].sum(-1), 1)


@pytest.mark.slow
def test_grpo_learns_the_question_answer_bandit():
    # Random answers are right 10% of the time, always answering 9 34%.
    _, m = _train("grpo_qa_bandit.yaml", total_env_steps=61_440, anneal_lr="false")
    late = _late_mean(m)
    assert (late > 0.6).all(), late
    assert np.asarray(m["grpo/first_ratio_dev"]).max() < 1e-5
    assert 0.0 <= m["grpo/zero_std_frac"].min() and m["grpo/zero_std_frac"].max() <= 1.0


@pytest.mark.slow
def test_grpo_learns_cartpole_with_grouped_rollouts():
    # Random play lasts about 22 steps; grouped GRPO passes 150 within 16 iterations.
    config, m = _train("grpo_cartpole.yaml", total_env_steps=256_000, anneal_lr="false")
    assert config.num_iterations == 16
    late = _late_mean(m)
    assert (late > 150).all(), late
    # Episode metrics come out of grouped iterations: one episode per trajectory at most.
    assert (m["episode/count"] <= config.num_envs).all() and (m["episode/count"] > 0).all()
