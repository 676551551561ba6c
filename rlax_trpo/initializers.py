"""An orthogonal initialiser without LAPACK: the same matrices as flax's, safe to vmap on CPU.

`nn.initializers.orthogonal` (jax's `random.orthogonal`) draws a Gaussian matrix and takes
the Q factor of its QR decomposition, sign-corrected so that R has a positive diagonal. On
CPU that QR is jaxlib's LAPACK `geqrf` custom call; vmapped (one network per seed), it
becomes a batched QR that jaxlib splits into sub-tasks on XLA's intra-op thread pool and
then waits for them *from a thread of that same pool*. With every pool thread waiting, the
process hangs with no CPU load (native stacks: `lapack_sgeqrf_ffi` ->
`jax::QrFactorization` -> `jax::ParallelBatchMap` -> `BlockingCounter::Wait`). See
docs/upstream/cpu_qr_deadlock.md for the standalone reproducer.

`orthogonal` below computes the same Q by classical Gram-Schmidt with one
re-orthogonalisation pass ("twice is enough", Giraud et al. 2005): column j of the draw has
its components along the previous columns removed twice and is normalised. That is exactly
the QR factor with a positive diagonal of R, so the result equals jax's to float32 rounding
(tests/test_initializers.py: <= 5e-7 on 4x64, 64x64, 64x2 and 900x128). It is a
`fori_loop` of matrix-vector products on whatever backend runs it, batched cleanly under
`vmap`, with `Precision.HIGHEST` so that TPU/GPU matmuls do not round to bfloat16/TF32.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_HIGHEST = jax.lax.Precision.HIGHEST


def orthonormal_columns(a: jax.Array) -> jax.Array:
    """Q with orthonormal columns and a = Q R, R upper triangular with positive diagonal.

    Args:
      a: `[m, n]` with m >= n and full column rank (true with probability 1 for a
        Gaussian draw).
    """
    m, n = a.shape

    def column(j, q):
        v = a[:, j]
        for _ in range(2):  # the second pass removes what rounding left of the first
            v = v - jnp.dot(q, jnp.dot(q.T, v, precision=_HIGHEST), precision=_HIGHEST)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    # Columns not yet computed are zero, so projecting on all of q projects on the done ones.
    return jax.lax.fori_loop(0, n, column, jnp.zeros((m, n), a.dtype))


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype: Any = jnp.float32):
    """Drop-in for `flax.linen.initializers.orthogonal(scale, column_axis)`.

    Draws the same Gaussian matrix from the same key and returns the same orthogonal
    matrix (to rounding), without a LAPACK call. Rows or columns are orthonormal,
    whichever side is smaller; leading axes of shapes with more than two dimensions are
    flattened into rows, as in jax.
    """

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = dtype) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer needs a shape of rank >= 2, got {shape}")
        if any(d == 0 for d in shape):
            return jnp.zeros(shape, dtype)
        n_cols = shape[column_axis]
        n_rows = math.prod(shape) // n_cols
        z = jax.random.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype)
        q = orthonormal_columns(z)
        if n_rows < n_cols:
            q = q.T
        q = q.reshape(tuple(np.delete(shape, column_axis)) + (n_cols,))
        return jnp.asarray(scale, dtype) * jnp.moveaxis(q, -1, column_axis)

    return init
