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


def test_the_loop_ends_when_every_episode_has_ended():
    # A time limit of 100,000 steps (Craftax's) bounds the loop; episodes of 8 steps end it.
    config = Config.create(env="Probe-timelimit", num_envs=2, num_steps=8, total_env_steps=16)
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0), config.hp)
    steps = []

    def counted(key, env_state, action):
        jax.debug.callback(lambda: steps.append(1))
        return trainer.env.step(key, env_state, action)

    env = trainer.env._replace(step=counted)
    evaluate = make_evaluate(config, env, trainer.networks, 3, True, max_steps=100_000)
    returns = jax.block_until_ready(jax.jit(evaluate)(state, jax.random.key(1)))
    np.testing.assert_array_equal(returns, 8.0)
    assert 8 <= len(steps) <= 8 * 3, len(steps)  # 8 batched steps (one call per env at most)


def _scan_reference(config, env, networks, num_episodes, greedy, horizon):
    """The evaluation as a fixed-length scan of `horizon` steps (every step taken)."""
    from rlax_trpo.evaluate import act, policy_memory
    from rlax_trpo.rollout import reset_envs

    def evaluate(state, key):
        k_reset, k_run = jax.random.split(key)
        obs, env_state = reset_envs(env, k_reset, num_episodes)

        def step(carry, step_key):
            env_state, obs, total, alive, memory = carry
            k_act, k_env = jax.random.split(step_key)
            memory, dist = act(networks, state.params.policy, memory, obs)
            action = dist.mode() if greedy else dist.sample(seed=k_act)
            res = jax.vmap(env.step)(jax.random.split(k_env, num_episodes), env_state, action)
            total = total + jax.numpy.where(alive, res.reward, 0.0)
            alive = alive & ~(res.terminated | res.truncated)
            return (res.state, res.obs, total, alive, memory), None

        init = (
            env_state,
            obs,
            jax.numpy.zeros(num_episodes),
            jax.numpy.ones(num_episodes, bool),
            policy_memory(networks, num_episodes),
        )
        return jax.lax.scan(step, init, jax.random.split(k_run, horizon))[0][2]

    return evaluate


@pytest.mark.parametrize("greedy", [True, False])
def test_returns_equal_those_of_every_step_taken(greedy):
    # Stochastic dynamics (MinAtar Asterix spawns at random) and a sampling policy: the loop
    # that stops early gives the returns of the scan that takes all `horizon` steps.
    config = Config.create(env="Asterix-MinAtar", num_envs=2, num_steps=8, total_env_steps=16)
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0), config.hp)
    args = (config, trainer.env, trainer.networks, 16, greedy)
    got = jax.jit(make_evaluate(*args, max_steps=400))(state, jax.random.key(3))
    want = jax.jit(_scan_reference(*args, horizon=400))(state, jax.random.key(3))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert np.asarray(want).std() > 0  # the episodes differ: the keys matter


def test_recording_stops_after_the_end_and_matches_the_whole_horizon():
    # Recorded in chunks of 64 until the episode ends: the same steps as recording the whole
    # horizon at once (stochastic Asterix: the per-step keys line up), and no more chunks.
    from rlax_trpo.evaluate import make_episode_recorder, record_episode

    config = Config.create(env="Asterix-MinAtar", num_envs=2, num_steps=8, total_env_steps=16)
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0), config.hp)
    args = (config, trainer.env, trainer.networks, True, 1200)
    whole = jax.jit(make_episode(*args))(state, jax.random.key(5))
    recorder = make_episode_recorder(*args, chunk=64)
    recorder = recorder._replace(start=jax.jit(recorder.start), advance=jax.jit(recorder.advance))
    got = record_episode(recorder, state, jax.random.key(5))
    end = int(np.argmax(np.asarray(whole.done)))  # MinAtar's time limit is 1000 < 1200
    assert len(got.done) == 64 * (end // 64 + 1)  # the chunk holding the end, then it stops
    cut = lambda x: np.asarray(x)[: len(got.done)]
    np.testing.assert_array_equal(got.done, cut(whole.done))
    np.testing.assert_array_equal(got.reward, cut(whole.reward))
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, cut(b)), got.env_state,
                 whole.env_state)  # fmt: skip
    # A time limit of 100,000 steps records one chunk of the default size for an 8-step episode.
    config = Config.create(env="Probe-timelimit", num_envs=2, num_steps=8, total_env_steps=16)
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0), config.hp)
    recorder = make_episode_recorder(config, trainer.env, trainer.networks, True, 100_000)
    episode = record_episode(recorder, state, jax.random.key(1))
    assert len(episode.done) == recorder.chunk == 500 and int(np.argmax(episode.done)) == 7
