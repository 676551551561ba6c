"""Probe environments with known answers, trained end to end through `make_trainer` (PPO).

A wrong bootstrap, a broken advantage sign or a mis-wired critic fails one of these.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probe_envs import register_probes

from rlax_trpo import Config, make_trainer

register_probes()


def _train(kind, iterations, gamma=0.9, lr=1e-2, algorithm="ppo", **extra):
    optimizer = dict(anneal_lr=False)
    optimizer_hp = dict(learning_rate=lr, max_grad_norm=100.0, ent_coef=0.0)
    own = {  # each algorithm gets only the fields it reads
        "ppo": dict(num_epochs=4, num_minibatches=2, **optimizer, hp=optimizer_hp),
        "vpg": dict(**optimizer, hp=optimizer_hp),
    }.get(algorithm, {"hp": {}})
    config = Config.create(
        algorithm=algorithm,
        env=f"Probe-{kind}",
        num_envs=8,
        num_steps=16,
        total_env_steps=8 * 16 * iterations,
        hidden_sizes=[16],
        **{**own, "hp": dict(gamma=gamma, gae_lambda=0.95, **own["hp"])},
        **extra,
    )
    trainer = make_trainer(config)
    state, metrics = jax.jit(trainer.train)(jax.random.key(0), config.hp)
    return trainer, state, metrics


def _value(trainer, state, obs):
    return np.asarray(trainer.networks.value(state.params.value, jnp.asarray(obs)))


@pytest.mark.parametrize("algorithm", ["ppo", "trpo", "npg", "vpg"])
def test_constant_reward_value_is_one(algorithm):
    # Every critic-based method fits its critic: V = 1 (an untrained critic says about 0).
    trainer, state, _ = _train("constant", 60, algorithm=algorithm)
    np.testing.assert_allclose(_value(trainer, state, [[0.0]]), [1.0], atol=0.05)


def test_observation_dependent_reward_value_is_obs():
    trainer, state, _ = _train("obs_reward", 60)
    np.testing.assert_allclose(_value(trainer, state, [[-1.0], [1.0]]), [-1.0, 1.0], atol=0.1)


def test_two_step_value_is_discounted():
    trainer, state, _ = _train("two_step", 60, gamma=0.9)
    np.testing.assert_allclose(_value(trainer, state, [[0.0], [1.0]]), [0.9, 1.0], atol=0.1)


def test_policy_picks_the_rewarded_action():
    trainer, state, metrics = _train("action", 60, lr=3e-3)
    probs = trainer.networks.policy(state.params.policy, jnp.zeros((1, 1))).probs
    assert float(probs[0, 1]) > 0.95
    assert float(metrics["episode/return"][-1]) > 0.9


@pytest.mark.parametrize("kind, expected", [("timelimit", 50.0), ("timelimit_as_terminal", None)])
def test_time_limit_bootstrap(kind, expected):
    """SB3's time-limit test: reward 1 per step, episodes cut at 8 steps, gamma 0.98.

    Truncation bootstraps from V(final_obs), so V(s0) -> 1/(1 - 0.98) = 50. Reporting the
    time limit as termination (the common mistake) makes V the average over the 8 visited
    steps of the return to the (false) end, (1/8) sum_n (1 - 0.98^n) / 0.02 = 4.30.
    """
    trainer, state, _ = _train(kind, 150, gamma=0.98)
    v0 = float(_value(trainer, state, [[0.0]])[0])
    if expected is None:
        expected = np.mean([(1 - 0.98**n) / 0.02 for n in range(1, 9)])
        assert v0 == pytest.approx(expected, rel=0.15)
    else:
        assert v0 == pytest.approx(expected, rel=0.05)
