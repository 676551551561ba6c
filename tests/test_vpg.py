"""VPG (REINFORCE with a learned baseline): one Adam step per batch, and it learns CartPole."""

from pathlib import Path

import jax
import numpy as np

from rlax_trpo import Config, load_config, make_trainer
from rlax_trpo.report.stats import final_returns, to_numpy

ROOT = Path(__file__).resolve().parents[1]


def test_vpg_runs_with_every_estimator_and_action_space():
    for env, advantage in (("CartPole-v1", "mc"), ("Pendulum-v1", "nstep")):
        config = Config.create(
            algorithm="vpg",
            env=env,
            advantage=advantage,
            num_envs=2,
            num_steps=32,
            total_env_steps=128,
            hidden_sizes=[8],
            value_epochs=1,
            value_minibatches=2,
        )
        state, m = jax.jit(make_trainer(config).train)(jax.random.key(0), config.hp)
        for name in ("policy/loss", "policy/kl_old_new", "value/loss", "grad_norm"):
            assert np.isfinite(np.asarray(m[name])).all(), name
        assert float(np.min(m["policy/kl_old_new"])) > 0.0  # the policy step moves the policy
        assert int(state.diverged_at) == -1


def test_vpg_learns_cartpole():
    config = load_config(ROOT / "configs" / "vpg_cartpole.yaml", ["total_env_steps=40960"])
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), 2)
    _, metrics = jax.jit(jax.vmap(trainer.train, in_axes=(0, None)))(keys, config.hp)
    finals = final_returns(to_numpy(metrics))
    # Random play scores about 22 on CartPole; the full config reaches 500 (4/4 seeds).
    assert finals.min() >= 120, finals
