"""The gymnax 1.0 contract, names, spaces and running statistics."""

import importlib
import importlib.metadata
import importlib.util
import itertools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.envs import check_env_name, make_env
from rlax_trpo.errors import ConfigError
from rlax_trpo.normalization import RunningMeanStd


def test_unknown_env_is_one_line_and_the_names_are_listed_on_request():
    """An unknown name: one line with the nearest valid name and the listing command;
    `rlax-trpo configs --envs` lists every suite's names, a paragraph each."""
    from rlax_trpo.envs.registry import env_listing

    with pytest.raises(ConfigError) as err:
        check_env_name("CartPole-v0")
    assert str(err.value) == (
        "env: unknown environment 'CartPole-v0' (did you mean 'CartPole-v1'? "
        "`rlax-trpo configs --envs` lists them all)"
    )
    with pytest.raises(ConfigError, match=r"'Zzzz-v9' \(`rlax-trpo configs --envs` lists"):
        check_env_name("Zzzz-v9")
    rest = env_listing().splitlines()
    assert rest[0].startswith("gymnax (no prefix): CartPole-v1, Pendulum-v1,")
    # (other tests in the same process may have registered more environments; sorted, they
    # may come before it)
    start = next(i for i, line in enumerate(rest) if line.startswith("registered: "))
    paragraph = [rest[start]] + list(
        itertools.takewhile(lambda line: line.startswith("    "), rest[start + 1 :])
    )
    assert "MaxDigit-qa" in " ".join(paragraph).replace(",", " ").split(), rest
    assert all(len(line) <= 100 for line in rest)
    listed = " ".join(rest)
    assert "Breakout-MinAtar" in listed
    assert len(rest) < 30  # a few lines per suite, not one line per name
    for suite in ("brax", "playground", "jumanji"):
        assert (f"{suite}/: " in listed) == bool(importlib.util.find_spec(suite_modules[suite]))


suite_modules = {"brax": "brax", "playground": "mujoco_playground", "jumanji": "jumanji"}


def test_unknown_env_is_refused_without_importing_the_suites():
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from rlax_trpo.envs import check_env_name\n"
        "try:\n"
        "    check_env_name('CartPol-v1')\n"
        "except Exception as err:\n"
        "    print(str(err).splitlines()[0])\n"
        "print(sorted(m for m in ('gymnax', 'brax', 'mujoco_playground', 'jumanji') "
        "if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, imported = done.stdout.splitlines()
    assert "(did you mean 'CartPole-v1'? `rlax-trpo configs --envs` lists them all)" in first
    assert imported == "[]"  # importing gymnax and brax to list names took 8-9 s


def test_making_a_gymnax_env_defers_its_renderers_plotting_libraries():
    """seaborn and pyplot (Pong's and Catch's renderers) are imported at their first use, not
    with gymnax: then Pong draws with the real seaborn, and `import seaborn` is the real one."""
    code = (
        "import sys\n"
        "from rlax_trpo.envs import make_env\n"
        "make_env('CartPole-v1')\n"
        "print(sorted(m for m in ('seaborn', 'matplotlib.pyplot', 'scipy.stats', 'pandas') "
        "if m in sys.modules))\n"
        "from gymnax.environments.misc import pong\n"
        "figure, _ = pong.plt.subplots()\n"
        "print(len(pong.sns.color_palette('cubehelix', 3)), type(figure).__name__)\n"
        "import seaborn\n"
        "print(type(seaborn).__name__, seaborn.color_palette is pong.sns.color_palette)\n"
    )
    env = {**os.environ, "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["[]", "3 Figure", "module True"], done.stdout


@pytest.mark.parametrize("suite", ["gymnax", "brax", "playground", "jumanji"])
def test_name_snapshots_are_the_installed_libraries(suite):
    module = importlib.import_module(f"rlax_trpo.envs.{suite}_suite")
    version, names = module.SNAPSHOT
    distribution = {"gymnax": "gymnax"}.get(suite, suite)
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        assert module.names() == module.live_names() == []
        return
    live = module.live_names()
    if installed == version:
        assert live == list(names)
    assert module.names() == live  # the snapshot, or the library's own list


def test_step_keeps_termination_truncation_and_final_obs_apart():
    env = make_env("CartPole-v1", {"max_steps_in_episode": 5})
    step = jax.jit(env.step)
    obs, state = env.reset(jax.random.key(0))
    seen_trunc = False
    for t in range(5):
        res = step(jax.random.key(t + 1), state, jnp.asarray(t % 2))
        if t < 4:
            assert not bool(res.truncated)
            np.testing.assert_allclose(res.final_obs, res.obs)  # no reset: same obs
        else:
            seen_trunc = bool(res.truncated)
            assert not bool(res.terminated)
            # the automatic reset changed obs; final_obs is the pre-reset observation
            assert not np.allclose(res.final_obs, res.obs)
            assert int(res.state.time) == 0
        state = res.state
    assert seen_trunc


def test_termination_is_not_truncation():
    env = make_env("CartPole-v1")
    step = jax.jit(env.step)
    obs, state = env.reset(jax.random.key(0))
    for t in range(200):  # always push right: the pole falls quickly
        res = step(jax.random.key(t), state, jnp.asarray(1))
        if bool(res.terminated):
            assert not bool(res.truncated)
            assert abs(float(res.final_obs[2])) > 0.2 or abs(float(res.final_obs[0])) > 2.4
            return
        state = res.state
    pytest.fail("CartPole never terminated")


def test_spaces_and_flattening():
    pend = make_env("Pendulum-v1")
    assert not pend.spec.discrete and pend.spec.num_actions == 1
    np.testing.assert_allclose(pend.spec.action_high, [2.0])
    breakout = make_env("Breakout-MinAtar", flatten=False)
    assert breakout.spec.obs_shape == (10, 10, 4) and breakout.spec.discrete
    flat = make_env("Breakout-MinAtar", flatten=True)
    obs, _ = flat.reset(jax.random.key(0))
    assert obs.shape == (400,)


def test_continuous_actions_are_clipped_for_the_env():
    env = make_env("Pendulum-v1")
    _, state = env.reset(jax.random.key(0))
    big = env.step(jax.random.key(1), state, jnp.array([100.0]))
    edge = env.step(jax.random.key(1), state, jnp.array([2.0]))
    np.testing.assert_allclose(big.obs, edge.obs)


def test_env_kwargs_unknown_field():
    with pytest.raises(ConfigError, match="env_kwargs.bogus"):
        make_env("CartPole-v1", {"bogus": 1})


def test_running_mean_std_matches_numpy():
    data = np.random.default_rng(0).normal(3.0, 2.0, size=(1000, 3)).astype(np.float32)
    stats = RunningMeanStd.create((3,))
    for chunk in np.split(data, 10):
        stats = stats.update(jnp.asarray(chunk))
    np.testing.assert_allclose(stats.mean, data.mean(0), rtol=1e-3)
    np.testing.assert_allclose(stats.var, data.var(0), rtol=1e-3)


def test_reward_scaling_divides_by_the_running_std_of_discounted_returns():
    # Two rollouts through normalize_trajectory against a numpy reference: rewards are divided
    # by the std of every discounted return seen so far (done resets the return), and the
    # observations get the statistics from before the rollout.
    from rlax_trpo import Config
    from rlax_trpo.normalization import Statistics, normalize_trajectory
    from rlax_trpo.types import Trajectory

    config = Config.create(normalize_reward=True, normalize_obs=True)
    rng = np.random.default_rng(1)
    t, b, gamma = 6, 3, 0.9
    stats = Statistics(RunningMeanStd.create((2,)), RunningMeanStd.create(), jnp.zeros(b))
    acc, seen_returns, seen_obs = np.zeros(b), [], []
    for _ in range(2):
        reward = rng.normal(size=(t, b)).astype(np.float32)
        done = rng.random((t, b)) < 0.3
        obs = rng.normal(2.0, 3.0, size=(t, b, 2)).astype(np.float32)
        zeros = jnp.zeros((t, b), bool)
        traj = Trajectory(obs, jnp.zeros((t, b)), jnp.zeros((t, b)), reward, zeros, zeros, obs)
        prior = np.concatenate(seen_obs) if seen_obs else None
        new, stats = normalize_trajectory(config, stats, traj, jnp.asarray(done), gamma)
        for step in range(t):
            acc = acc * gamma + reward[step]
            seen_returns.append(acc.copy())
            acc = acc * (1 - done[step])
        std = np.sqrt(np.var(np.concatenate(seen_returns)) + 1e-8)
        np.testing.assert_allclose(new.reward, np.clip(reward / std, -10, 10), rtol=2e-3)
        if prior is None:  # before any statistics: mean 0, var 1
            np.testing.assert_allclose(new.obs, np.clip(obs, -10, 10), rtol=1e-6)
        else:
            mean, var = prior.mean(0), prior.var(0)
            expected = np.clip((obs - mean) / np.sqrt(var + 1e-8), -10, 10)
            np.testing.assert_allclose(new.obs, expected, rtol=2e-3, atol=2e-3)
        seen_obs.append(obs.reshape(-1, 2))
        np.testing.assert_allclose(stats.return_acc, acc, rtol=1e-5, atol=1e-6)
