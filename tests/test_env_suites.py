"""The Brax, MuJoCo Playground and Jumanji adapters against the suites themselves.

Each adapter is stepped beside the raw environment with the same actions: observations
agree until the episode ends; at the end the flags say how it ended (termination or time
limit, never both), `final_obs` is the raw environment's last observation, and the next
observation is a fresh start. Then the flags go through the training loop: episode counts
and lengths in the metrics are those the time limit implies. The suites are optional extras
(in `dev`); without them these tests skip.
"""

from __future__ import annotations

import importlib.util

import conftest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import Config, make_trainer
from rlax_trpo.envs import check_env_name, make_env
from rlax_trpo.errors import ConfigError

needs = {
    m: pytest.mark.skipif(importlib.util.find_spec(m) is None, reason=f"{m} is not installed")
    for m in ("brax", "mujoco_playground", "jumanji")
}


def _episode(env, raw_reset, raw_step, raw_obs, actions, key=7):
    """Step the adapter and the raw environment together until the adapter's episode ends;
    returns (steps taken, the ending StepResult, the raw observation at the end, the reset
    observation the adapter's step key draws)."""
    reset = jax.jit(env.reset)  # eager MJX/Brax resets take ~20 s op by op
    obs, state = reset(jax.random.key(key))
    raw = raw_reset(jax.random.key(key))
    np.testing.assert_allclose(obs, raw_obs(raw), rtol=1e-5, atol=1e-6)
    step = jax.jit(env.step)
    for t, action in enumerate(actions):
        k = jax.random.key(1000 + t)
        res = step(k, state, action)
        raw = raw_step(raw, action)
        if bool(res.terminated) or bool(res.truncated):
            return t + 1, res, raw_obs(raw), reset(k)[0]
        np.testing.assert_allclose(res.obs, raw_obs(raw), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(res.final_obs, res.obs)
        state = res.state
    pytest.fail("the episode did not end")


@needs["mujoco_playground"]
def test_playground_time_limit_is_a_truncation_with_the_pre_reset_observation():
    from mujoco_playground import registry

    env = make_env("playground/CartpoleBalance", {"episode_length": 7})
    raw_env = registry.load("CartpoleBalance", config_overrides={"impl": "jax"})
    actions = [jnp.array([0.3 * (-1) ** t], jnp.float32) for t in range(20)]
    steps, res, raw_last, fresh = _episode(
        env, jax.jit(raw_env.reset), jax.jit(raw_env.step), lambda s: s.obs, actions
    )
    assert steps == 7 and bool(res.truncated) and not bool(res.terminated)
    np.testing.assert_allclose(res.final_obs, raw_last, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res.obs, fresh)
    assert not np.allclose(res.final_obs, res.obs)
    assert int(res.state.steps) == 0 and float(res.state.inner.info["truncation"]) == 0.0
    assert env.spec.max_episode_steps == 7 and not env.spec.discrete
    np.testing.assert_allclose(env.spec.action_high, [1.0])


@needs["brax"]
def test_brax_termination_is_not_a_truncation():
    from brax import envs

    env = make_env("brax/inverted_pendulum")
    raw_env = envs.get_environment("inverted_pendulum")
    actions = [jnp.ones((1,))] * 50  # pushes the pole over within a few steps
    steps, res, raw_last, fresh = _episode(
        env, jax.jit(raw_env.reset), jax.jit(raw_env.step), lambda s: s.obs, actions
    )
    assert steps < 50 and bool(res.terminated) and not bool(res.truncated)
    np.testing.assert_allclose(res.final_obs, raw_last, rtol=1e-4, atol=1e-5)
    assert abs(float(res.final_obs[1])) > 0.2  # the pole angle that ended it
    np.testing.assert_allclose(res.obs, fresh)


@needs["brax"]
def test_brax_actions_are_clipped_and_the_truncation_is_marked():
    env = make_env("brax/inverted_pendulum", {"episode_length": 3})
    _, state = jax.jit(env.reset)(jax.random.key(0))
    step = jax.jit(env.step)
    big = step(jax.random.key(1), state, jnp.array([50.0]))
    edge = step(jax.random.key(1), state, jnp.array([1.0]))
    np.testing.assert_allclose(big.obs, edge.obs)
    for t in range(3):  # no force: the pole stays up for the 3 steps of the limit
        res = step(jax.random.key(t + 2), state, jnp.zeros((1,)))
        assert bool(res.truncated) == (t == 2) and not bool(res.terminated)
        state = res.state
    assert float(res.final_obs[1]) != float(res.obs[1])  # reset after the pre-reset obs


@needs["jumanji"]
@pytest.mark.parametrize("limit", ["time_limit", "episode_length"])
def test_jumanji_time_limit_is_a_truncation(limit):
    """Jumanji ends its time limit with discount 0; the adapter enforces the limit itself
    and ends it as a truncation (Snake-v1 from key 7 starts in the top row)."""
    import jumanji

    env = make_env("jumanji/Snake-v1", {limit: 3})
    raw_env = jumanji.make("Snake-v1", time_limit=3)
    actions = [jnp.asarray(2, jnp.int32)] * 5  # down, away from the top wall

    def raw_step(carry, action):
        return raw_env.step(carry[0], action)

    steps, res, raw_last, fresh = _episode(
        env, jax.jit(raw_env.reset), jax.jit(raw_step), lambda c: _flat(c[1].observation), actions
    )
    assert steps == 3 and bool(res.truncated) and not bool(res.terminated)
    np.testing.assert_allclose(res.final_obs, raw_last)
    np.testing.assert_allclose(res.obs, fresh)
    raw_state, timestep = raw_env.reset(jax.random.key(7))
    for action in actions[:3]:
        raw_state, timestep = raw_env.step(raw_state, action)
    assert int(timestep.step_type) == 2 and float(timestep.discount) == 0.0  # Jumanji's view


@needs["jumanji"]
def test_jumanji_termination_has_discount_zero():
    import jumanji

    env = make_env("jumanji/Snake-v1")
    raw_env = jumanji.make("Snake-v1")
    actions = [jnp.asarray(0, jnp.int32)] * 20  # straight up into the wall

    def raw_step(carry, action):
        return raw_env.step(carry[0], action)

    steps, res, raw_last, _ = _episode(
        env, jax.jit(raw_env.reset), jax.jit(raw_step), lambda c: _flat(c[1].observation), actions
    )
    assert steps < 20 and bool(res.terminated) and not bool(res.truncated)
    np.testing.assert_allclose(res.final_obs, raw_last)
    assert env.spec.discrete and env.spec.num_actions == 4


def _flat(observation):
    return jnp.concatenate(
        [jnp.asarray(x, jnp.float32).reshape(-1) for x in jax.tree.leaves(observation)]
    )


@needs["mujoco_playground"]
def test_episode_counts_through_the_training_loop():
    """Probe-timelimit never terminates and is truncated at 8 steps: every episode that ends
    in the metrics is 8 steps long, and 8 envs x 100 steps end 96 of them in the first
    iteration (12 each) and 104 in the second (the 4 steps carried over complete one more
    each). A suite's own truncation is checked per suite below (Playground, Brax)."""
    from probe_envs import register_probes

    register_probes()
    config = Config.create(
        algorithm="ppo", env="Probe-timelimit", num_envs=8, num_steps=100, total_env_steps=1600,
        num_epochs=1, num_minibatches=1, hidden_sizes=[8],
    )  # fmt: skip
    trainer = make_trainer(config)
    _, metrics = jax.jit(trainer.train)(jax.random.key(0), config.hp)
    np.testing.assert_array_equal(np.asarray(metrics["episode/count"]), [96, 104])
    np.testing.assert_allclose(np.asarray(metrics["episode/length"]), [8, 8])


def test_a_suite_that_is_not_installed_says_which_extra(monkeypatch):
    from rlax_trpo.envs import brax_suite

    monkeypatch.setattr(brax_suite, "names", lambda: [])
    with pytest.raises(ConfigError, match=r"pip install 'rlax_trpo\[brax\]'"):
        check_env_name("brax/hopper")


@needs["jumanji"]
@pytest.mark.slow
def test_ppo_learns_snake_from_its_bundled_config():
    """327,680 steps of `ppo_jumanji_snake`: a random policy eats 0.1 fruit per episode,
    this run about 1.1; a broken observation or episode end stays near 0.1."""
    from rlax_trpo import load_config
    from rlax_trpo.report.stats import final_returns, to_numpy

    config = load_config("ppo_jumanji_snake", ["total_env_steps=327680"])
    train = conftest.jit_default_codegen(make_trainer(config).train)
    _, metrics = train(jax.random.key(0), config.hp)
    assert final_returns(to_numpy(metrics)).mean() > 0.5


@needs["jumanji"]
def test_jumanji_episodes_render_to_a_gif(tmp_path):
    env = make_env("jumanji/Snake-v1")
    _, state = env.reset(jax.random.key(7))
    states = [state]
    for t in range(3):
        state = env.step(jax.random.key(t), state, jnp.asarray(2)).state
        states.append(state)
    env.render(states, np.arange(4.0), str(tmp_path / "snake.gif"))
    assert (tmp_path / "snake.gif").read_bytes()[:3] == b"GIF"
