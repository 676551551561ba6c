"""Random permutations for minibatch shuffling, cheaper than `jax.random.permutation`, and
minibatches drawn with them as indices (`Gathered`).

`jax.random.permutation(key, n)` sorts a (random key, index) pair of arrays. XLA:CPU sorts a
pair with a generic compiled comparator but a single integer array with a specialised
fast path. On the 2-core CPU (jax 0.10.2), `python benchmarks/shuffle.py` measured 13 us
against 42 us at 256 elements, 43 us (two rounds) against 80 us at 512 and 156 us against
724 us at 2048. PPO shuffles once per epoch: at PureJaxRL's CartPole settings that is
four 512-element shuffles per 3-4 ms iteration.

Packing: each element gets a uint32 whose high bits are random and whose low `ceil(log2 n)`
bits are its index; one sort of those integers orders the indices by their random parts,
and a mask recovers them. Equal random parts keep index order, which is the tie rule of
`jax.random.permutation` (a stable sort) with fewer random bits, so, as it does, we repeat
independent rounds (composing the permutations) until n**3 <= 2**(rounds * random bits), the
same criterion jax uses for its rounds. Beyond 2048 elements a round would expect more than
one tied pair, and we call `jax.random.permutation` instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

# Largest n for the packed path: 2048 leaves 21 random bits, an expected
# n**2 / 2**22 = 1 tied pair per round; beyond that ties would no longer be rare.
MAX_PACKED = 2048


def packed_rounds(n: int) -> int:
    """Rounds of the packed shuffle for `n` elements (jax's n**3 <= 2**(rounds * bits) rule)."""
    index_bits = max((n - 1).bit_length(), 1)
    random_bits = 32 - index_bits
    return max(1, math.ceil(3 * math.log2(max(n, 2)) / random_bits))


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A uniformly random permutation of `range(n)` (int32), as `jax.random.permutation`.

    The result differs from `jax.random.permutation(key, n)` for the same key (another
    algorithm draws it), but it is a deterministic function of `key`, as that is.
    """
    if n > MAX_PACKED:
        return jax.random.permutation(key, n)
    index_bits = max((n - 1).bit_length(), 1)
    mask = jnp.uint32((1 << index_bits) - 1)
    index = jnp.arange(n, dtype=jnp.uint32)
    perm = index
    for round_key in jax.random.split(key, packed_rounds(n)):
        bits = jax.random.bits(round_key, (n,), jnp.uint32)
        packed = (bits & ~mask) | index
        perm = perm[jax.lax.sort(packed) & mask]
    return perm.astype(jnp.int32)


class Gathered(NamedTuple):
    """An epoch's minibatches as indices into a batch that stays in its one layout:
    `index` holds every minibatch's indices stacked on a leading axis `[M, ...]`, and
    `take(index[m])` gathers the m-th minibatch. `epochs_of_minibatches` gathers each one
    inside its minibatch loop, so no shuffled copy of the whole batch is ever held (with
    Craftax's 8,268-float observations, that copy is 2 GiB per seed and iteration)."""

    index: Any
    take: Callable[[Any], Any]


def gathered_minibatches(
    batch: Any, key: jax.Array, num_minibatches: int, groups: int = 1
) -> Gathered:
    """`num_minibatches` shuffled minibatches of a batch's leading axis `[N, ...]`.

    With `groups > 1` the batch is `groups` equal contiguous blocks (one per environment of
    an env-major batch); each block is shuffled on its own, every minibatch takes the same
    number of samples from every block and is gathered block by block (`take_along_axis`),
    so a batch split over devices along its blocks is read without communication."""
    n = jax.tree.leaves(batch)[0].shape[0]
    if groups == 1:
        perm = permutation(key, n).reshape(num_minibatches, -1)
        return Gathered(perm, lambda idx: jax.tree.map(lambda x: jnp.take(x, idx, axis=0), batch))
    per = n // groups
    perms = jax.vmap(lambda k: permutation(k, per))(jax.random.split(key, groups))
    index = jnp.swapaxes(perms.reshape(groups, num_minibatches, -1), 0, 1)  # [M, groups, q]

    def take(idx: jax.Array) -> Any:
        def leaf(x):
            x = x.reshape((groups, per) + x.shape[1:])
            i = idx.reshape(idx.shape + (1,) * (x.ndim - 2))
            return jnp.take_along_axis(x, i, axis=1).reshape((-1,) + x.shape[2:])

        return jax.tree.map(leaf, batch)

    return Gathered(index, take)


def gathered_sequences(batch: Any, key: jax.Array, num_minibatches: int) -> Gathered:
    """Minibatches of whole environment sequences of a memory batch (`[T, B, ...]` leaves, a
    `memory` field of start states `[B, ...]`): environments shuffled and split, each with
    all its steps in time order and its start memory."""
    steps, memory0 = batch._replace(memory=None), batch.memory
    num_envs = jax.tree.leaves(steps)[0].shape[1]
    perm = permutation(key, num_envs).reshape(num_minibatches, -1)

    def take(idx: jax.Array) -> Any:
        seqs = jax.tree.map(lambda x: jnp.take(x, idx, axis=1), steps)
        return seqs._replace(memory=jax.tree.map(lambda x: jnp.take(x, idx, axis=0), memory0))

    return Gathered(perm, take)
