"""The Craftax adapter against Craftax itself (the optional `craftax` extra; skips without).

As for the other suites (tests/test_env_suites.py): observations agree with the raw
environment step for step; the time limit is a truncation and death a termination, never
both; `final_obs` is the last observation and the next one a fresh world's; the episode
figures (score in % of the maximum, achievements) are those of the raw state. How episode
figures reach the metrics and the summary through the training loop, with pooled resets, is
tests/test_rollout.py's (an environment whose figures have a known answer).
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("craftax") is None, reason="craftax is not installed"
)

CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"


def _raw(name="Craftax-Classic-Symbolic-v1", **params):
    from craftax.craftax_env import make_craftax_env_from_name

    raw = make_craftax_env_from_name(name, auto_reset=False)
    return raw, raw.default_params.replace(**params)


@pytest.fixture(scope="module")
def classic():
    """Craftax-Classic-Symbolic with 6-step episodes and its compiled step (compiled once:
    a Craftax step takes about 15 s to compile)."""
    from rlax_trpo.envs import make_env

    env = make_env(CLASSIC, {"max_timesteps": 6})
    return env, jax.jit(env.step)


def test_time_limit_is_a_truncation_and_the_observations_are_craftaxs(classic):
    env, step = classic
    raw, params = _raw(max_timesteps=6)
    assert env.spec.obs_shape == (1345,) and env.spec.num_actions == 17
    assert env.spec.max_episode_steps == 6
    # Resets jitted: eagerly, world generation dispatches (and compiles) op by op.
    reset = jax.jit(env.reset)
    obs, state = reset(jax.random.key(3))
    raw_obs, raw_state = jax.jit(raw.reset_env)(jax.random.key(3), params)
    np.testing.assert_allclose(obs, raw_obs, rtol=1e-6)
    raw_step = jax.jit(lambda k, s, a: raw.step_env(k, s, a, params))
    actions = [5, 5, 2, 1, 0, 5]  # do, do, right, left, noop, do
    total = 0.0
    for t, a in enumerate(actions):
        key = jax.random.key(10 + t)
        res = step(key, state, jnp.asarray(a))
        k_step, k_reset = jax.random.split(key)
        raw_obs, raw_state, raw_reward, raw_done, _ = raw_step(k_step, raw_state, a)
        np.testing.assert_allclose(res.final_obs, raw_obs, rtol=1e-6)
        np.testing.assert_allclose(res.reward, raw_reward)
        if t < 5:
            assert not bool(res.terminated | res.truncated) and not bool(raw_done)
            np.testing.assert_allclose(res.obs, raw_obs, rtol=1e-6)
            total += float(raw_reward)
            np.testing.assert_allclose(res.state.episode_return, total, rtol=1e-6)
            state = res.state
        if t == 4:  # 3 more carried into the last step: its score is the episode's return
            state = state._replace(episode_return=state.episode_return + 3.0)
    assert bool(res.truncated) and not bool(res.terminated) and bool(raw_done)
    np.testing.assert_allclose(res.obs, reset(k_reset)[0], rtol=1e-6)  # a fresh world
    assert int(res.state.inner.timestep) == 0 and float(res.state.episode_return) == 0.0
    unlocked = np.asarray(raw_state.achievements, np.float32)
    assert float(res.info["achievements"]) == unlocked.sum()
    assert float(res.info["achievement/collect_wood"]) == unlocked[0]
    ret = float(state.episode_return) + float(res.reward)
    np.testing.assert_allclose(res.info["score_percent"], 100 * ret / 22, rtol=1e-6)
    # Each Classic achievement gives 1: the achievements' reward is their count, out of 22.
    np.testing.assert_allclose(
        res.info["achievement_reward_percent"], 100 * unlocked.sum() / 22, rtol=1e-6
    )


def test_death_is_a_termination(classic):
    env, step = classic
    _, state = env.reset(jax.random.key(0))
    health = state.inner.player_health
    dying = state._replace(inner=state.inner.replace(player_health=jnp.full_like(health, -5)))
    res = step(jax.random.key(1), dying, jnp.asarray(0))
    assert bool(res.terminated) and not bool(res.truncated)


def test_the_full_game_scores_out_of_226():
    from rlax_trpo.envs import make_env
    from rlax_trpo.envs.craftax_suite import max_return

    assert max_return(classic=False) == 226.0 and max_return(classic=True) == 22.0
    env = make_env("craftax/Craftax-Symbolic-v1")
    assert env.spec.obs_shape == (8268,) and env.spec.num_actions == 43
    assert env.spec.max_episode_steps == 100_000
    info = jax.eval_shape(
        env.step, jax.random.key(1), jax.eval_shape(env.reset, jax.random.key(0))[1], jnp.asarray(0)
    ).info
    assert len([k for k in info if k.startswith("achievement/")]) == 67


def test_the_achievements_reward_goes_by_tier_out_of_226():
    """`achievement_reward_percent` weighs each achievement by its tier's reward (Matthews et
    al. 2024: basic 1, intermediate 3, advanced 5, very advanced 8), by name, out of 226;
    success rates weigh the same way."""
    from rlax_trpo.envs.craftax_suite import achievement_names, achievement_reward_percent

    names = achievement_names(classic=False)

    def percent(*unlocked, rate=1.0):
        flags = np.zeros(len(names))
        flags[[names.index(n) for n in unlocked]] = rate
        return float(achievement_reward_percent(flags, classic=False))

    for name, reward in [
        ("collect_wood", 1), ("make_wood_pickaxe", 1), ("enter_dungeon", 3),
        ("open_chest", 3), ("enter_sewers", 5), ("defeat_knight", 5),
        ("defeat_necromancer", 8), ("enter_fire_realm", 8),
    ]:  # fmt: skip
        assert percent(name) == pytest.approx(100 * reward / 226, rel=1e-6), name
    assert percent("collect_wood", "enter_dungeon", rate=0.5) == pytest.approx(200 / 226)
    assert percent(*names) == pytest.approx(100.0, rel=1e-6)
    assert float(achievement_reward_percent(np.ones(22), classic=True)) == pytest.approx(100.0)


def test_episodes_render_to_a_gif(classic, tmp_path):
    env, step = classic
    _, state = env.reset(jax.random.key(7))
    states = [state, step(jax.random.key(1), state, jnp.asarray(5)).state]
    env.render(states, np.arange(2.0), str(tmp_path / "craftax.gif"))
    assert (tmp_path / "craftax.gif").read_bytes()[:3] == b"GIF"
