"""`rlax_trpo.load_policy`: a trained member of a saved run, acting and evaluating.

One small run (PPO, CartPole, 2 seeds, observation normalisation on) serves every test.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import rlax_trpo
from rlax_trpo import Config, run
from rlax_trpo.errors import ConfigError


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    config = Config.create(
        algorithm="ppo", env="CartPole-v1", num_envs=8, num_steps=32, total_env_steps=16_384,
        num_epochs=10, num_minibatches=1, normalize_obs=True, eval_episodes=6,
        hp=dict(learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, ent_coef=0.0),
    )  # fmt: skip
    out = tmp_path_factory.mktemp("policy") / "run"
    result = run(config, seeds=2, seed=3, out=out, progress=False)
    assert result.status == "complete"
    return out, json.loads((out / "summary.json").read_text())


def test_evaluate_reproduces_the_runs_greedy_evaluation(finished):
    out, summary = finished
    per_seed = summary["eval_return_per_seed"]
    assert len(per_seed) == 2 and per_seed[0] != per_seed[1]  # the members differ
    for member in range(2):
        returns = rlax_trpo.load_policy(out, member=member).evaluate()
        assert returns.shape == (6,)
        np.testing.assert_allclose(returns.mean(), per_seed[member], rtol=1e-6)


def test_act_is_the_policy_that_evaluate_plays(finished):
    """A Python loop of jitted `act` and `env.step` calls, with the keys `evaluate` uses,
    earns the same return as `evaluate(1, key)`: act applies the run's normalisation and
    takes the greedy action."""
    out, _ = finished
    policy = rlax_trpo.load_policy(out, member=1)
    env, key = policy.env, jax.random.key(7)
    act, step = jax.jit(policy.act), jax.jit(jax.vmap(env.step))
    k_reset, k_run = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(k_reset, 1))
    total, alive = 0.0, True
    for step_key in jax.random.split(k_run, env.spec.max_episode_steps):
        k_act, k_env = jax.random.split(step_key)
        res = step(jax.random.split(k_env, 1), state, act(obs, k_act))
        total += float(res.reward[0]) if alive else 0.0
        alive = alive and not bool(res.terminated[0] | res.truncated[0])
        obs, state = res.obs, res.state
        if not alive:
            break
    assert total == pytest.approx(float(policy.evaluate(1, key)[0]), abs=1e-4)
    assert total > 25  # trained: a random CartPole policy averages about 22


def test_act_samples_with_a_key_and_refuses_without(finished):
    out, _ = finished
    policy = rlax_trpo.load_policy(out)
    obs = jax.random.normal(jax.random.key(0), (256, 4))
    sample = jax.jit(lambda o, k: policy.act(o, k, deterministic=False))
    a, b = np.asarray(sample(obs, jax.random.key(1))), np.asarray(sample(obs, jax.random.key(2)))
    assert a.shape == (256,) and (a != b).any()  # sampled, by the key
    greedy = np.asarray(policy.act(obs, jax.random.key(1)))
    np.testing.assert_array_equal(greedy, np.asarray(policy.act(obs, jax.random.key(2))))
    with pytest.raises(ValueError, match="needs a key"):
        policy.act(obs, deterministic=False)


def test_a_member_out_of_range_is_one_line(finished):
    out, _ = finished
    with pytest.raises(ConfigError, match="between 0 and 1"):
        rlax_trpo.load_policy(out, member=2)
    with pytest.raises(ConfigError, match="not a run folder"):
        rlax_trpo.load_policy(out / "nowhere")
