"""Rollouts (`rlax_trpo.rollout`): what `collect` records, time-major, and cheap resets
(`reset_ratio`), where finished environments restart from a pool of fresh states.

Where the reset is deterministic the pooled rollout is the ordinary one, step for step; where
it is random, new episodes still start from the reset distribution, environments that end
together get distinct fresh states while the pool lasts, and episode statistics match.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probe_envs import register_probes

from rlax_trpo import Config, make_trainer
from rlax_trpo.envs import make_env, register_env
from rlax_trpo.errors import ConfigError
from rlax_trpo.rollout import (
    EnvCarry,
    _pack,
    _unpack,
    collect,
    fresh_episodes,
    pooled_step,
    reset_envs,
)


def _uniform_policy(num_actions):
    import distrax

    return lambda obs: distrax.Categorical(logits=jnp.zeros(obs.shape[:1] + (num_actions,)))


def _rollout(env, num_envs, num_steps, reset_ratio, key=0):
    obs, state = reset_envs(env, jax.random.key(key), num_envs)
    carry = EnvCarry(state, obs, fresh_episodes(num_envs))
    policy = _uniform_policy(env.spec.num_actions)
    run = jax.jit(lambda k: collect(env, policy, carry, k, num_steps, reset_ratio=reset_ratio))
    return run(jax.random.key(key + 1))


def test_collect_records_each_step_time_major_with_both_end_flags_and_pre_reset_obs():
    register_probes()
    ro = _rollout(make_env("Probe-two_step"), 3, 5, 1)  # obs 0 then 1, reward and end on 1
    traj = ro.trajectory
    assert traj.obs.shape == (5, 3, 1) and traj.action.shape == traj.reward.shape == (5, 3)
    ends = np.array([0, 1, 0, 1, 0], bool)[:, None].repeat(3, 1)
    np.testing.assert_array_equal(traj.obs[..., 0], np.where(ends, 1.0, 0.0))
    np.testing.assert_array_equal(traj.final_obs[..., 0], np.ones((5, 3)))  # before the reset
    np.testing.assert_array_equal(traj.terminated, ends)
    assert not np.asarray(traj.truncated).any()
    np.testing.assert_array_equal(ro.done, ends)
    np.testing.assert_array_equal(ro.finished_return, np.where(ends, 1.0, 0.0))
    np.testing.assert_array_equal(ro.finished_length, np.where(ends, 2, 0))
    np.testing.assert_allclose(traj.log_prob, np.log(0.5), rtol=1e-6)  # the acting policy's
    np.testing.assert_array_equal(ro.carry.episode.episode_length, [1, 1, 1])  # one step in
    # A time limit is a truncation, not a termination; the next observation is the reset one.
    ro = _rollout(make_env("Probe-timelimit"), 2, 10, 1)
    cut = np.arange(10)[:, None].repeat(2, 1) == 7
    np.testing.assert_array_equal(ro.trajectory.truncated, cut)
    assert not np.asarray(ro.trajectory.terminated).any()
    np.testing.assert_array_equal(ro.finished_return, np.where(cut, 8.0, 0.0))


def test_the_loops_state_and_outputs_go_packed_and_come_back_leaf_for_leaf():
    # `collect` carries its state and stacks its per-step outputs with the small leaves
    # packed by shape and dtype (one copy and one write per dtype a step); unpacked, every
    # leaf is back in its place, bit for bit.
    b = 3
    key = iter(jax.random.split(jax.random.key(0), 8))
    tree = {
        "log_prob": jax.random.normal(next(key), (b,)),
        "reward": jax.random.normal(next(key), (b,)),
        "action": jnp.array([2, 0, 1], jnp.int32),
        "length": jnp.array([7, 8, 9], jnp.int32),
        "ends": (jnp.array([True, False, True]), jnp.array([False, False, True])),
        "obs": jax.random.normal(next(key), (b, 5, 2)),  # small: packed with the f32 [3]
        "map": jax.random.normal(next(key), (b, 9, 9)),  # over SMALL numbers: as it is
        "info": {"wood": jnp.float32(2.0), "table": jnp.float32(1.0)},
        "none": None,
    }
    packed = _pack(tree)
    shapes = sorted((str(x.dtype), x.shape) for x in packed.arrays)
    assert shapes == [("bool", (b, 2)), ("float32", (2,)), ("float32", (b, 9, 9)),
                      ("float32", (b, 12)), ("int32", (b, 2))]  # fmt: skip
    later = lambda x: ~x if x.dtype == jnp.bool_ else x + 1  # commutes with the packing
    steps = jax.tree.map(lambda x: jnp.stack([x, later(x)]), packed)  # as the scan stacks
    back = _unpack(steps)
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, jnp.stack([want, later(want)]))


@pytest.mark.parametrize("probe", ["Probe-two_step", "Probe-timelimit"])
def test_with_a_deterministic_reset_the_pooled_rollout_is_the_ordinary_one(probe):
    register_probes()
    env = make_env(probe)
    plain = _rollout(env, 8, 40, 1)
    pooled = _rollout(env, 8, 40, 4)
    assert int(plain.done.sum()) > 8  # episodes do end, and restart
    for name in ("obs", "action", "reward", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(
            getattr(pooled.trajectory, name), getattr(plain.trajectory, name), err_msg=name
        )
    np.testing.assert_array_equal(pooled.finished_return, plain.finished_return)
    np.testing.assert_array_equal(pooled.finished_length, plain.finished_length)


def test_new_episodes_start_from_the_reset_distribution():
    """CartPole resets every state variable uniformly in [-0.05, 0.05]. With a pool of 1/8
    of the width, the first observation of every new episode is still such a draw: inside
    the range, mean 0 and standard deviation 0.1 / sqrt(12); a rollout that forgot to reset
    would show the terminal states (|angle| > 0.2 or |x| > 2.4)."""
    env = make_env("CartPole-v1")
    ro = _rollout(env, 64, 200, 8)
    done = np.asarray(ro.done[:-1])
    starts = np.asarray(ro.trajectory.obs[1:])[done]  # the step after an episode ended
    assert len(starts) > 300
    assert np.abs(starts).max() <= 0.05
    np.testing.assert_allclose(starts.mean(0), 0.0, atol=0.01)
    np.testing.assert_allclose(starts.std(0), 0.1 / np.sqrt(12), rtol=0.15)
    # Episode lengths under the uniform policy: the same distribution as resetting each env.
    plain = _rollout(env, 64, 200, 1, key=5)
    lengths = lambda r: np.asarray(r.finished_length)[np.asarray(r.done)]
    np.testing.assert_allclose(lengths(ro).mean(), lengths(plain).mean(), rtol=0.1)


def test_environments_ending_together_take_distinct_fresh_states_while_the_pool_lasts():
    env = make_env("CartPole-v1")
    num_envs, ratio = 16, 4
    step = jax.jit(pooled_step(env, num_envs, ratio))
    _, state = reset_envs(env, jax.random.key(0), num_envs)
    # push every pole over: after some steps of action 1 many environments end at once
    action = jnp.ones((num_envs,), jnp.int32)
    for t in range(30):
        res = step(jax.random.key(100 + t), state, action)
        done = np.asarray(res.terminated | res.truncated)
        if done.sum() >= 2:
            break
        state = res.state
    starts = np.asarray(res.obs)[done]
    assert 2 <= done.sum()
    distinct = len({tuple(row) for row in starts.round(7)})
    assert distinct == min(int(done.sum()), num_envs // ratio)
    np.testing.assert_array_equal(np.asarray(res.obs)[~done], np.asarray(res.final_obs)[~done])


def test_reset_ratio_is_checked():
    with pytest.raises(ConfigError, match="reset_ratio: 3 does not divide num_envs = 8"):
        Config.create(algorithm="ppo", num_envs=8, reset_ratio=3)
    grpo = Config.create(
        algorithm="grpo", env="CartPole-v1", num_envs=8, num_steps=16, group_size=4,
        num_minibatches=1, reset_ratio=2,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="reset_ratio: grpo collects its own rollouts"):
        make_trainer(grpo)
    # a ready-made Env of a user's that gives no transition without reset
    register_env(
        "CartPole-no-transition", lambda: make_env("CartPole-v1")._replace(transition=None)
    )
    bare = Config.create(algorithm="ppo", env="CartPole-no-transition", num_envs=8, reset_ratio=2)
    with pytest.raises(ConfigError, match="reset_ratio: CartPole-no-transition gives no step"):
        make_trainer(bare)


def _start_recorder(length: int):
    """Episodes of `length` steps from a random start `s ~ U(0, 1)`; the episode that ends
    reports `start = s` and `start_sq = s**2` as its figures (`StepResult.info`)."""
    from rlax_trpo.envs.base import Env, EnvSpec, StepResult, auto_reset

    def reset(key):
        s = jax.random.uniform(key)
        return jnp.array([s]), (s, jnp.asarray(0))

    def transition(key, state, action):
        s, t = state
        t = t + 1
        obs = jnp.array([s])
        info = {"start": s, "start_sq": s**2}
        end = t >= length
        return StepResult(obs, (s, t), jnp.asarray(0.0), end, jnp.asarray(False), obs, info)

    spec = EnvSpec(obs_shape=(1,), discrete=True, num_actions=2, max_episode_steps=length)
    return Env(reset, auto_reset(transition, reset), spec, "StartRecorder", None, transition)


@pytest.mark.parametrize("ratio", [1, 8])
def test_the_training_loop_takes_its_fresh_states_from_the_pool(ratio, tmp_path):
    """8 environments whose episodes all end together every iteration. With a pool of one
    fresh state per step (ratio 8) every new episode of an iteration has the same start, so
    (sum of starts)^2 = 8 * (sum of squared starts); each environment resetting on its own
    (ratio 1) draws 8 different starts, and the equality fails."""
    from rlax_trpo import load_config, run

    register_env("StartRecorder", lambda: _start_recorder(16))
    config = load_config(
        None,
        ["env=StartRecorder", "num_envs=8", "num_steps=16", "total_env_steps=640",
         f"reset_ratio={ratio}", "num_epochs=1", "num_minibatches=1", "hidden_sizes=[8]",
         "eval_episodes=1"],
    )  # fmt: skip
    result = run(config, seeds=1, out=tmp_path / "run", progress=False)
    total = np.asarray(result.metrics["episode/start_sum"]).reshape(-1)[1:]  # after the first
    squares = np.asarray(result.metrics["episode/start_sq_sum"]).reshape(-1)[1:]
    assert len(total) == 4 and (squares > 0).all()
    same = np.isclose(total**2, 8 * squares, rtol=1e-4)
    assert same.all() if ratio == 8 else not same.any()
    # the summary's figure per seed: the mean over the episodes of the last iteration (10%)
    figures = result.summary["final_episode_figures_per_seed"]
    assert set(figures) == {"start", "start_sq"}
    np.testing.assert_allclose(figures["start"][0], total[-1] / 8, rtol=1e-5)
    np.testing.assert_allclose(figures["start_sq"][0], squares[-1] / 8, rtol=1e-5)
