"""The training loop (`rlax_trpo.training`): jit equals no-jit, vmap over seeds equals
separate runs, vmapped hyperparameters, the divergence guard, the episode figures, the
iteration count, and the environment it builds."""

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo import Config, make_train, make_trainer
from rlax_trpo.envs import make_env
from rlax_trpo.rollout import RolloutResult
from rlax_trpo.training import episode_metrics_of, guard_divergence

SMALL = dict(num_envs=4, num_steps=16, total_env_steps=4 * 16 * 3, num_epochs=2, num_minibatches=2)


def test_jit_equals_no_jit():
    # Small: without jit every op is dispatched one by one (one iteration, both minibatches).
    config = Config.create(
        **{**SMALL, "num_envs": 2, "num_steps": 4, "total_env_steps": 2 * 4, "num_epochs": 1}
    )
    train = make_train(config)
    key = jax.random.key(3)
    _, jitted = jax.jit(train)(key, config.hp)
    with jax.disable_jit():
        _, eager = train(key, config.hp)
    for name in ("policy/loss", "value/loss", "episode/return_sum", "grad_norm"):
        np.testing.assert_allclose(jitted[name], eager[name], rtol=2e-4, atol=1e-5)


def test_vmap_over_seeds_equals_separate_runs():
    config = Config.create(**SMALL)
    train = jax.jit(make_train(config))
    keys = jax.random.split(jax.random.key(7), 3)
    _, batched = jax.jit(jax.vmap(make_train(config), in_axes=(0, None)))(keys, config.hp)
    for i in range(3):
        _, single = train(keys[i], config.hp)
        for name in ("policy/loss", "value/loss", "episode/return_sum"):
            np.testing.assert_allclose(batched[name][i], single[name], rtol=1e-4, atol=1e-5)


def test_vmap_over_learning_rate():
    config = Config.create(**SMALL)
    hps = jax.tree.map(lambda x: jax.numpy.stack([x, x]), config.hp)
    hps = hps.replace(learning_rate=jax.numpy.array([1e-4, 1e-2]))
    _, m = jax.jit(jax.vmap(make_train(config), in_axes=(None, 0)))(jax.random.key(0), hps)
    np.testing.assert_allclose(m["ppo/learning_rate"][:, 0], [1e-4, 1e-2], rtol=1e-6)
    assert not np.allclose(m["policy/loss"][0], m["policy/loss"][1])


def test_non_finite_update_is_not_applied():
    config = Config.create(**SMALL)
    trainer = make_trainer(config)
    hp = config.hp.replace(learning_rate=jax.numpy.float32(np.nan))
    state, metrics = jax.jit(trainer.train)(jax.random.key(0), hp)
    assert int(state.diverged_at) == 0
    init = jax.jit(trainer.init)(jax.random.key(0), hp)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state.params))
    # (`train` and `init` are two programs: their initialisations may differ in the last bit.)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(init.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    assert float(metrics["train/finite"].max()) == 0.0


def test_the_guard_keeps_a_diverged_member_frozen_from_its_first_non_finite_update():
    config = Config.create(**SMALL)
    trainer = make_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0), config.hp)
    params = jax.tree.map(lambda x: x + 1.0, state.params)
    bad = jax.tree.map(lambda x: x * jnp.nan, state.params)
    reward = jnp.zeros((2, 3))
    state = state.replace(iteration=jnp.int32(5))
    # A finite update is applied; a non-finite one is not, and records the iteration.
    p, _, at, finite = guard_divergence(state, (params, state.algo_state, {}), reward)
    assert bool(finite) and int(at) == -1
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), p, params))
    p, _, at, finite = guard_divergence(state, (bad, state.algo_state, {}), reward)
    assert not bool(finite) and int(at) == 5
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), p, state.params))
    # Once diverged, a later finite update is not applied either, and the first iteration stays.
    later = state.replace(diverged_at=jnp.int32(5), iteration=jnp.int32(9))
    p, _, at, _ = guard_divergence(later, (params, state.algo_state, {}), reward)
    assert int(at) == 5
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), p, state.params))
    # A non-finite figure the update was computed from (a reward) counts as divergence too.
    _, _, at, finite = guard_divergence(state, (params, state.algo_state, {}), reward * jnp.nan)
    assert not bool(finite) and int(at) == 5


def test_episode_metrics_are_those_of_the_episodes_that_finished():
    done = jnp.array([[False, True], [True, True]])
    returns = jnp.array([[0.0, 3.0], [5.0, 7.0]])
    lengths = jnp.array([[0, 4], [6, 2]])
    ro = RolloutResult(None, None, returns, lengths, done, None, {"score": jnp.float32(2.5)})
    last, m = episode_metrics_of(ro, jnp.float32(jnp.nan))
    assert float(last) == float(m["episode/return"]) == 5.0  # (3 + 5 + 7) / 3
    assert float(m["episode/count"]) == 3 and float(m["episode/return_sum"]) == 15.0
    assert float(m["episode/length"]) == 4.0 and float(m["episode/score_sum"]) == 2.5
    # With no episode finished the latest mean return is carried.
    none = ro._replace(done=jnp.zeros_like(done), finished_return=jnp.zeros_like(returns))
    last, m = episode_metrics_of(none, jnp.float32(5.0))
    assert float(last) == 5.0 and float(m["episode/count"]) == 0


def test_an_iteration_spends_its_rollout_and_a_run_as_many_as_fit():
    trainer = make_trainer(Config.create(num_envs=4, num_steps=8, total_env_steps=100))
    assert trainer.steps_per_iteration == 32 and trainer.num_iterations == 3
    _, metrics = jax.jit(trainer.train)(jax.random.key(0), trainer.config.hp)
    assert metrics["episode/return"].shape == (3,)


def test_trainer_builds_the_environment_once_and_flattens_for_an_mlp(monkeypatch):
    from rlax_trpo import training

    made = []
    real = training.make_env
    monkeypatch.setattr(training, "make_env", lambda *a, **k: made.append(a) or real(*a, **k))
    config = Config.create(env="Breakout-MinAtar", network="mlp", num_envs=2, num_steps=4)
    env = training.make_trainer(config).env
    assert len(made) == 1
    flat = make_env("Breakout-MinAtar", flatten=True)  # gymnax's own flattening
    assert env.spec == flat.spec and env.spec.obs_shape == (400,)
    key = jax.random.key(3)
    (obs, state), (ref, ref_state) = env.reset(key), flat.reset(key)
    np.testing.assert_array_equal(obs, ref)
    res, ref_res = env.step(key, state, 1), flat.step(key, ref_state, 1)
    np.testing.assert_array_equal(res.obs, ref_res.obs)
    np.testing.assert_array_equal(res.final_obs, ref_res.final_obs)
