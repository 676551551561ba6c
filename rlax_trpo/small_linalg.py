"""Cholesky and triangular solves of small matrices without LAPACK, for the CPU lowering.

`rlax_trpo.platform.lapack_free_linalg_on_cpu` lowers jax's linear-algebra primitives as
plain HLO so that no batched LAPACK kernel can wait on XLA's intra-op pool
(docs/upstream/cpu_lapack_deadlock.md). XLA's own Cholesky and triangular-solve expanders are
blocked algorithms written for large matrices: on the batch of small mass matrices that MuJoCo
physics factorises in every step they cost several times LAPACK (3.8x the env-step time on
HumanoidWalk's 27x27). For matrices of at most `MAX_UNROLLED` rows these functions unroll the
textbook algorithms over the columns instead: n steps of batched vector products that XLA
fuses, with no loop and no custom call. Larger matrices keep XLA's expanders.

Both are checked against LAPACK's results in tests/test_platform.py.
"""

from __future__ import annotations

import jax.numpy as jnp

MAX_UNROLLED = 32


def cholesky(a: jnp.ndarray) -> jnp.ndarray:
    """The lower Cholesky factor of each `[..., n, n]` matrix (its lower triangle is read).
    A matrix that is not positive definite gives NaNs, as jax's lowerings do."""
    n = a.shape[-1]
    rows = jnp.arange(n)
    columns: list[jnp.ndarray] = []  # [..., n] each
    for j in range(n):  # left-looking: column j from the columns before it
        v = a[..., :, j]
        if j:
            done = jnp.stack(columns, axis=-1)  # [..., n, j]
            v = v - jnp.einsum("...ik,...k->...i", done, done[..., j, :])
        col = v / jnp.sqrt(v[..., j : j + 1])
        columns.append(jnp.where(rows >= j, col, 0.0).astype(a.dtype))
    return jnp.stack(columns, axis=-1)


def triangular_solve(
    a: jnp.ndarray,
    b: jnp.ndarray,
    *,
    left_side: bool,
    lower: bool,
    transpose_a: bool,
    conjugate_a: bool,
    unit_diagonal: bool,
) -> jnp.ndarray:
    """`jax.lax.linalg.triangular_solve`'s result: X with op(a) X = b (left_side) or
    X op(a) = b, op(a) = a, a^T or a^H; only the named triangle of `a` is read."""
    if conjugate_a:
        a = jnp.conj(a)
    n = a.shape[-1]
    keep = jnp.tril(jnp.ones((n, n), bool)) if lower else jnp.triu(jnp.ones((n, n), bool))
    a = jnp.where(keep, a, 0)
    if unit_diagonal:
        a = jnp.where(jnp.eye(n, dtype=bool), 1, a)
    if transpose_a:
        a, lower = jnp.swapaxes(a, -1, -2), not lower
    if not left_side:  # X A = B  <=>  A^T X^T = B^T
        a, lower = jnp.swapaxes(a, -1, -2), not lower
        b = jnp.swapaxes(b, -1, -2)
    if not lower:  # reversing rows and columns turns an upper system into a lower one
        x = _forward_substitution(a[..., ::-1, ::-1], b[..., ::-1, :])[..., ::-1, :]
    else:
        x = _forward_substitution(a, b)
    return jnp.swapaxes(x, -1, -2) if not left_side else x


def _forward_substitution(lower: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """X with L X = B, L `[..., n, n]` lower triangular, B `[..., n, m]`."""
    rows: list[jnp.ndarray] = []  # [..., m] each
    for i in range(lower.shape[-1]):
        r = b[..., i, :]
        if i:
            done = jnp.stack(rows, axis=-2)  # [..., i, m]
            r = r - jnp.einsum("...k,...km->...m", lower[..., i, :i], done)
        rows.append(r / lower[..., i, i : i + 1])
    return jnp.stack(rows, axis=-2)
