"""The library's own gymnax environments: MaxDigit-qa (question-answer bandit)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.envs import make_env, valid_env_names
from rlax_trpo.envs.own import MaxDigit


def test_max_digit_registered_and_shaped():
    assert "MaxDigit-qa" in valid_env_names()
    env = make_env("MaxDigit-qa")
    assert env.spec.obs_shape == (40,)
    assert env.spec.discrete and env.spec.num_actions == 10
    assert env.spec.max_episode_steps == 1


def test_max_digit_gymnax_contract_and_reward():
    gym_env = MaxDigit(4, 10)
    params = gym_env.default_params
    keys = jax.random.split(jax.random.key(0), 256)
    obs, state = jax.vmap(gym_env.reset, (0, None))(keys, params)
    assert obs.shape == (256, 4, 10)
    np.testing.assert_array_equal(obs.sum(-1), 1.0)  # one-hot digits
    np.testing.assert_array_equal(obs.argmax(-1), state.digits)
    answer = state.digits.max(-1)
    step = jax.vmap(gym_env.step, (0, 0, 0, None))
    for action, expected in ((answer, 1.0), ((answer + 1) % 10, 0.0)):
        out = step(jax.random.split(jax.random.key(1), 256), state, action, params)
        new_obs, new_state, reward, terminated, truncated, info = out
        np.testing.assert_array_equal(reward, expected)
        assert bool(terminated.all()) and not bool(truncated.any())
        # final_observation is the answered question; the returned obs is a new one.
        np.testing.assert_array_equal(info["final_observation"], obs)
        assert bool((new_state.digits != state.digits).any(-1).mean() > 0.9)
        np.testing.assert_array_equal(new_state.time, 0)


def test_max_digit_random_answer_rate():
    env = make_env("MaxDigit-qa")
    keys = jax.random.split(jax.random.key(2), 4000)
    _, state = jax.vmap(env.reset)(keys)
    res = jax.vmap(env.step)(keys, state, jnp.full((4000,), 9))
    # Always answering 9 is right when some digit is 9: 1 - 0.9^4 = 0.344.
    assert abs(float(res.reward.mean()) - 0.3439) < 0.03
