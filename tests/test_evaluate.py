"""Evaluation episodes: one whole first episode per environment, nothing after its end."""

import jax
import numpy as np
import pytest
from probe_envs import register_probes

from rlax_trpo import Config, make_trainer
from rlax_trpo.evaluate import make_episode, make_evaluate

register_probes()


def _evaluate(kind, episodes=6, greedy=True, max_steps=None):
    config = Config.create(env=f"Probe-{kind}", num_envs=2, num_steps=8, total_env_steps=16)
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0), config.hp)
    evaluate = make_evaluate(config, trainer.env, trainer.networks, episodes, greedy, max_steps)
    return np.asarray(jax.jit(evaluate)(state, jax.random.key(1)))


@pytest.mark.parametrize("greedy", [True, False])
def test_returns_stop_at_the_first_episode_end(greedy):
    # Reward 1 every step: a terminated one-step episode returns exactly 1 and a truncated
    # 8-step episode exactly 8, however long the evaluation horizon.
    np.testing.assert_array_equal(_evaluate("constant", greedy=greedy), np.ones(6))
    np.testing.assert_array_equal(_evaluate("constant", greedy=greedy, max_steps=30), np.ones(6))
    np.testing.assert_array_equal(_evaluate("timelimit", greedy=greedy, max_steps=30), 8.0)


def test_the_step_limit_cuts_long_episodes():
    np.testing.assert_array_equal(_evaluate("timelimit", max_steps=5), 5.0)


def test_recorded_episode_marks_its_end():
    config = Config.create(env="Probe-timelimit", num_envs=2, num_steps=8, total_env_steps=16)
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0), config.hp)
    episode = jax.jit(make_episode(config, trainer.env, trainer.networks, True, 12))(
        state, jax.random.key(1)
    )
    done = np.asarray(episode.done)
    assert done.shape == (12,) and int(np.argmax(done)) == 7  # the 8th step ends it
