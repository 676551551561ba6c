"""PPO's KL-penalty forms: the adaptive-beta rule (PPO paper, sec. 4) and its logged beta."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.algorithms.ppo import adapt_kl_beta
from rlax_trpo.config import Config
from rlax_trpo.training import make_trainer

TARGET = 0.01
# (beta, d, expected beta): halve if d < d_targ / 1.5, double if d > 1.5 d_targ, else keep.
TABLE = [
    (1.0, 0.0, 0.5),
    (1.0, 0.001, 0.5),
    (1.0, 0.0066, 0.5),  # just below 0.01 / 1.5 = 0.00667
    (1.0, 0.0067, 1.0),  # just above it
    (1.0, 0.01, 1.0),
    (1.0, 0.015, 1.0),  # the boundary itself is kept
    (1.0, 0.0151, 2.0),
    (0.25, 1.0, 0.5),
    (3.0, 0.003, 1.5),
]


@pytest.mark.parametrize("jit", [False, True])
def test_adaptive_beta_rule_table(jit):
    beta, d, expected = (jnp.array(c, jnp.float32) for c in zip(*TABLE, strict=True))
    fn = jax.vmap(adapt_kl_beta, (0, 0, None))
    out = (jax.jit(fn) if jit else fn)(beta, d, jnp.float32(TARGET))
    np.testing.assert_allclose(out, expected, rtol=1e-6)


# The discount, lambda and entropy bonus these tests were calibrated with (PureJaxRL's).
CALIBRATED_HP = {"gamma": 0.99, "gae_lambda": 0.95, "ent_coef": 0.01}


def _run(penalty: str, iterations: int = 40, epochs: int = 10):
    config = Config.create(
        algorithm="ppo",
        penalty=penalty,
        env="CartPole-v1",
        num_envs=4,
        num_steps=128,
        total_env_steps=512 * iterations,
        num_epochs=epochs,
        num_minibatches=4,
        hp={"learning_rate": 1e-3, "kl_beta": 1.0, "kl_target": TARGET, **CALIBRATED_HP},
    )
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), 2)
    _, metrics = jax.jit(jax.vmap(trainer.train, (0, None)))(keys, config.hp)
    return config, jax.tree.map(np.asarray, metrics)


def test_logged_beta_follows_the_rule_and_ppo_kl_learns():
    config, m = _run("kl_adaptive")
    beta, d = m["ppo/kl_beta"], m["ppo/kl_after_update"]
    prev = np.concatenate([np.ones((2, 1)), beta[:, :-1]], axis=1)  # beta before each update
    expected = np.where(d < TARGET / 1.5, prev / 2, prev)
    expected = np.where(d > 1.5 * TARGET, expected * 2, expected)
    np.testing.assert_allclose(beta, expected, rtol=1e-6)
    assert len(np.unique(beta)) > 1  # beta actually moved
    np.testing.assert_array_less(m["ppo/first_ratio_dev"], 1e-5)
    # It learns: the last quarter's finished episodes are far longer than random (about 22).
    sums, counts = m["episode/return_sum"], m["episode/count"]
    late = sums[:, -10:].sum(1) / counts[:, -10:].sum(1)
    assert (late > 100).all(), late


def test_fixed_beta_stays_fixed():
    _, m = _run("kl_fixed", iterations=3, epochs=1)
    np.testing.assert_array_equal(m["ppo/kl_beta"], 1.0)
    assert np.isfinite(m["ppo/kl_after_update"]).all()


def test_the_kl_penalty_holds_the_policy_back():
    # The same updates with beta 0 and with a large fixed beta: the penalty must shrink the
    # KL each update moves the policy (with it removed from the loss both would be equal).
    config = Config.create(
        algorithm="ppo",
        penalty="kl_fixed",
        env="CartPole-v1",
        num_envs=4,
        num_steps=128,
        total_env_steps=512 * 3,
        num_epochs=10,
        num_minibatches=4,
        hp={"learning_rate": 3e-3, "kl_target": TARGET, **CALIBRATED_HP},
    )
    trainer = make_trainer(config)
    hps = jax.tree.map(lambda x: jnp.stack([x, x]), config.hp).replace(
        kl_beta=jnp.array([0.0, 30.0])
    )
    keys = jnp.stack([jax.random.key(0), jax.random.key(0)])
    _, m = jax.jit(jax.vmap(trainer.train))(keys, hps)
    free, held = np.asarray(m["ppo/kl_after_update"]).mean(axis=1)
    assert held < 0.5 * free, (held, free)
