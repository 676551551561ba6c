"""`rlax_trpo.shuffle.permutation`: a permutation, deterministic per key, and uniform."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import shuffle


@pytest.mark.parametrize("n", [1, 2, 3, 7, 256, 512, 1000, 2048, 3000])
def test_is_a_permutation_and_deterministic_per_key(n):
    a = np.asarray(shuffle.permutation(jax.random.key(0), n))
    assert a.dtype == np.int32
    np.testing.assert_array_equal(np.sort(a), np.arange(n))
    np.testing.assert_array_equal(a, np.asarray(shuffle.permutation(jax.random.key(0), n)))
    if n >= 7:
        assert not np.array_equal(a, np.asarray(shuffle.permutation(jax.random.key(1), n)))
        assert not np.array_equal(a, np.arange(n))


def test_rounds_follow_jax_criterion():
    # n**3 <= 2**(rounds * (32 - index bits)): one round at 256, two from 512 to 2048.
    assert [shuffle.packed_rounds(n) for n in (2, 256, 512, 1024, 2048)] == [1, 1, 2, 2, 2]


def test_all_orders_of_four_are_equally_likely():
    draws = 24_000
    keys = jax.random.split(jax.random.key(42), draws)
    perms = np.asarray(jax.jit(jax.vmap(lambda k: shuffle.permutation(k, 4)))(keys))
    index = {p: i for i, p in enumerate(itertools.permutations(range(4)))}
    counts = np.bincount([index[tuple(p)] for p in perms], minlength=24)
    chi2 = ((counts - draws / 24) ** 2 / (draws / 24)).sum()
    assert chi2 < 57.1  # chi-square, 23 degrees of freedom: 99.99% quantile 57.07


def test_positions_are_uniform_at_two_rounds():
    # n = 512 takes the two-round path with 23 random bits per round. Ties keep index order,
    # so a biased packing would show up as index-position correlation.
    n, draws = 512, 2000
    keys = jax.random.split(jax.random.key(5), draws)
    perms = np.asarray(jax.jit(jax.vmap(lambda k: shuffle.permutation(k, n)))(keys))
    positions = np.argsort(perms, axis=1)  # positions[d, i]: where element i landed
    mean_pos = positions.mean(axis=0)
    se = np.sqrt((n**2 - 1) / 12 / draws)  # standard error of a mean position (~3.3)
    assert np.abs(mean_pos - (n - 1) / 2).max() < 5 * se
    corr = np.corrcoef(np.tile(np.arange(n), draws), positions.ravel())[0, 1]
    assert abs(corr) < 0.01
    # Neighbouring elements are not kept together.
    gaps = np.abs(np.diff(positions, axis=1)).mean()
    assert abs(gaps - (n + 1) / 3) < 0.05 * n


def test_beyond_the_packed_range_it_is_jax_permutation():
    key = jax.random.key(9)
    n = shuffle.MAX_PACKED + 1
    np.testing.assert_array_equal(
        np.asarray(shuffle.permutation(key, n)), np.asarray(jax.random.permutation(key, n))
    )


def test_traced_inside_jit_and_vmap():
    keys = jax.random.split(jax.random.key(1), 3)
    out = jax.jit(jax.vmap(lambda k: shuffle.permutation(k, 100)))(keys)
    assert out.shape == (3, 100)
    assert jnp.all(jnp.sort(out, axis=1) == jnp.arange(100))
