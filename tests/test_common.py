"""The algorithms' shared toolbox (`rlax_trpo.algorithms.common`): the memory seam
(`BatchLayout`: the learner's batch, minibatches and subsamples of samples or of whole
sequences), its checks, gradient clipping and learning-rate annealing."""

from types import SimpleNamespace

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlax_trpo import Config, shuffle
from rlax_trpo.algorithms.common import (
    BatchLayout,
    Gathered,
    anneal,
    batch_layout,
    clip_by_global_norm,
    epochs_of_minibatches,
    flat_optimizer_step,
    flatten_batch,
    optimizer_step,
)
from rlax_trpo.errors import ConfigError
from rlax_trpo.memory import Memory
from rlax_trpo.types import Batch

T, B = 6, 4
FEED_FORWARD, WITH_MEMORY = SimpleNamespace(recurrent=False), SimpleNamespace(recurrent=True)


def _batch(memory: bool = False) -> Batch:
    """`[T, B]` leaves holding each step's id 10 * env + t (obs, action) and its env (value)."""
    t, b = np.meshgrid(np.arange(T), np.arange(B), indexing="ij")
    ids = jnp.asarray(10 * b + t, jnp.float32)
    env = jnp.asarray(b, jnp.float32)
    start = Memory(jnp.arange(B, dtype=jnp.float32)[:, None], None) if memory else None
    first = jnp.zeros((T, B), bool) if memory else None
    return Batch(ids, ids, ids, ids, ids, env, first, start)


def test_feed_forward_learner_batch_is_flattened_time_major_or_env_major():
    batch = _batch()
    time_major = BatchLayout(False, False, 1).learner(batch)
    np.testing.assert_array_equal(time_major.obs, np.asarray(batch.obs).reshape(-1))
    env_major = BatchLayout(False, True, B).learner(batch)
    np.testing.assert_array_equal(env_major.obs, np.asarray(batch.obs).T.reshape(-1))
    assert flatten_batch(batch).obs.shape == (T * B,)


@pytest.mark.parametrize("env_major", [False, True])
def test_feed_forward_minibatches_partition_the_batch(env_major):
    layout = BatchLayout(False, env_major, B if env_major else 1)
    flat = layout.learner(_batch())
    mbs = layout.minibatches(flat, jax.random.key(0), 3)
    assert mbs.obs.shape == (3, T * B // 3)
    assert sorted(np.asarray(mbs.obs).ravel()) == sorted(np.asarray(flat.obs))
    np.testing.assert_array_equal(mbs.action, mbs.obs)  # leaves shuffled together
    if env_major:  # every minibatch takes the same number of steps of every environment
        for mb in np.asarray(mbs.value):
            assert np.bincount(mb.astype(int), minlength=B).tolist() == [T // 3] * B


def _spelled_out(layout: BatchLayout, batch: Batch, key: jax.Array, m: int) -> list:
    """The minibatches written out with numpy from the same permutations: samples
    `perm[j * q:(j + 1) * q]`; with blocks, those of every block in block order; with
    sequences, whole environments with their start memory."""
    take = lambda tree, idx, axis: jax.tree.map(lambda x: np.take(np.asarray(x), idx, axis), tree)
    if layout.sequences:
        perm = np.asarray(shuffle.permutation(key, B)).reshape(m, -1)
        steps = batch._replace(memory=None)
        return [take(steps, i, 1)._replace(memory=take(batch.memory, i, 0)) for i in perm]
    n = T * B
    if layout.groups == 1:
        return [take(batch, i, 0) for i in np.asarray(shuffle.permutation(key, n)).reshape(m, -1)]
    per = n // layout.groups
    keys = jax.random.split(key, layout.groups)
    perms = np.stack([np.asarray(shuffle.permutation(k, per)) for k in keys])
    q = per // m
    return [
        take(batch, np.concatenate([g * per + perms[g, j * q : (j + 1) * q] for g in range(B)]), 0)
        for j in range(m)
    ]


@pytest.mark.parametrize(
    "layout",
    [BatchLayout(False, False, 1), BatchLayout(False, True, B), BatchLayout(True, False, 1)],
    ids=["samples", "per-env blocks", "sequences"],
)
def test_minibatches_stacked_and_gathered_are_the_shuffle_spelled_out(layout):
    """`layout.gathered` (indices, each minibatch gathered inside the loop) and
    `layout.minibatches` (stacked) give the minibatches written out with numpy from the
    same permutations, sample for sample, and `epochs_of_minibatches` runs either to the
    same result."""
    batch = layout.learner(_batch(memory=layout.sequences))
    key = jax.random.key(5)
    stacked = layout.minibatches(batch, key, 2)
    gathered = layout.gathered(batch, key, 2)
    assert isinstance(gathered, Gathered) and gathered.index.shape[0] == 2
    for m, expected in enumerate(_spelled_out(layout, batch, key, 2)):
        jax.tree.map(np.testing.assert_array_equal, gathered.take(gathered.index[m]), expected)
        jax.tree.map(lambda a, b, m=m: np.testing.assert_array_equal(a[m], b), stacked, expected)

    def step(total, mb):  # order-sensitive: a different minibatch order gives another sum
        return total * 3.0 + mb.obs.sum(), mb.obs[..., 0]

    runs = [
        epochs_of_minibatches(step, jnp.float32(0), key, 3, lambda k, f=f: f(batch, k, 2))
        for f in (layout.minibatches, layout.gathered)
    ]
    jax.tree.map(np.testing.assert_array_equal, runs[0], runs[1])


def test_memory_batches_stay_whole_sequences():
    layout = BatchLayout(True, False, 1)
    batch = _batch(memory=True)
    assert layout.learner(batch) is batch  # `[T, B]`, as collected
    mbs = layout.minibatches(batch, jax.random.key(1), 2)
    assert mbs.obs.shape == (2, T, B // 2) and mbs.memory.policy.shape == (2, B // 2, 1)
    for i in range(2):
        envs = np.asarray(mbs.value[i, 0])
        assert (np.asarray(mbs.value[i]) == envs).all()  # the same environments at every step
        steps = np.broadcast_to(np.arange(T)[:, None], (T, B // 2))
        np.testing.assert_array_equal(np.asarray(mbs.obs[i]) % 10, steps)  # time in order
        np.testing.assert_array_equal(mbs.memory.policy[i, :, 0], envs)  # with their memory
    sub = layout.subsample(batch, 0.5)  # every 2nd environment, whole, with its memory
    np.testing.assert_array_equal(sub.value[0], [0.0, 2.0])
    np.testing.assert_array_equal(sub.memory.policy[:, 0], [0.0, 2.0])


def test_feed_forward_subsample_is_every_kth_sample():
    flat = BatchLayout(False, False, 1).learner(_batch())
    sub = BatchLayout(False, False, 1).subsample(flat, 0.2)
    np.testing.assert_array_equal(sub.obs, np.asarray(flat.obs)[::5])


def test_the_layout_follows_the_networks_and_checks_its_counts():
    config = Config.create(num_envs=4, num_steps=6)
    assert batch_layout(config, FEED_FORWARD, num_minibatches=3) == BatchLayout(False, False, 1)
    assert batch_layout(config, WITH_MEMORY, num_minibatches=2).sequences
    with pytest.raises(ConfigError, match="num_minibatches: 3 does not divide num_envs = 4"):
        batch_layout(config, WITH_MEMORY, num_minibatches=3)
    per_env = config.replace(shuffle="per_env")
    assert batch_layout(per_env, FEED_FORWARD, value_minibatches=3) == BatchLayout(False, True, 4)
    with pytest.raises(ConfigError, match="divide num_steps = 6"):
        batch_layout(per_env, FEED_FORWARD, value_minibatches=4)


def test_clipping_is_optaxs_rule_and_reports_the_norm_before():
    grads = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([[12.0]])}  # global norm 13
    clipped, norm = clip_by_global_norm(grads, jnp.float32(6.5))
    expected, _ = optax.clip_by_global_norm(6.5).update(grads, None)
    assert float(norm) == pytest.approx(13.0)
    for a, b in zip(jax.tree.leaves(clipped), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    same, _ = clip_by_global_norm(grads, jnp.float32(20.0))
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), same, grads))


@pytest.mark.parametrize("max_norm", [0.5, 100.0])  # clipped, and not
def test_the_flat_optimiser_step_is_the_step_on_the_flat_vector(max_norm):
    """`flat_optimizer_step` on a pytree: bit for bit `optimizer_step` on the ravelled
    parameters and gradients, with the parameters handed back as the same pytree."""
    keys = jax.random.split(jax.random.key(0), 4)
    params = {"w": jax.random.normal(keys[0], (3, 2)), "b": jax.random.normal(keys[1], (2,))}
    grads = {"w": jax.random.normal(keys[2], (3, 2)), "b": jax.random.normal(keys[3], (2,))}
    flat_params, unravel = jax.flatten_util.ravel_pytree(params)
    optimizer = optax.adam(1e-2)
    state = optimizer.init(flat_params)
    for _ in range(2):  # a second step sees Adam's moments
        out, state_out, norm = flat_optimizer_step(
            optimizer, params, state, grads, jnp.float32(max_norm)
        )
        flat_grads = jax.flatten_util.ravel_pytree(grads)[0]
        want, want_state, want_norm = optimizer_step(
            optimizer, flat_params, state, flat_grads, jnp.float32(max_norm)
        )
        assert jax.tree.structure(out) == jax.tree.structure(params)
        np.testing.assert_array_equal(jax.flatten_util.ravel_pytree(out)[0], want)
        assert float(norm) == float(want_norm)
        for a, b in zip(jax.tree.leaves(state_out), jax.tree.leaves(want_state), strict=True):
            np.testing.assert_array_equal(a, b)
        params, flat_params, state = out, want, state_out


def test_annealing_decays_linearly_to_zero_over_the_run():
    config = Config.create(num_envs=4, num_steps=8, total_env_steps=320)  # 10 iterations
    lrs = [float(anneal(config, jnp.float32(1.0), jnp.int32(u))) for u in (0, 5, 10)]
    assert lrs == pytest.approx([1.0, 0.5, 0.0])
    assert float(anneal(config.replace(anneal_lr=False), jnp.float32(1.0), jnp.int32(5))) == 1.0
