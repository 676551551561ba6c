"""Schedules over a run: `linear_decay`, and the horizon they decay over as a traced input.

An annealed hyperparameter (`anneal_lr`, `anneal_ent_coef`, `anneal_max_kl`, ...) decays
linearly to 0 over `config.num_iterations`. Written into the program as a constant, that
count would make every budget a new program to compile. `rlax_trpo.experiment` compiles one
segment program for every budget instead: it traces the iterations inside
`traced_horizon(horizon)`, with `horizon` an input of the program, and `linear_decay` then
multiplies by that input's reciprocal. Outside it (a whole run traced as one `lax.scan`, an
algorithm called on its own) the count it is given is a constant, whose float32 reciprocal
it multiplies by: what XLA makes of a division by a constant. The two give the same numbers
bit for bit (tests/test_resume.py).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

# The traced horizon of the iterations being traced now (None: use the count given).
_HORIZON: contextvars.ContextVar[jax.Array | None] = contextvars.ContextVar(
    "rlax_trpo_horizon", default=None
)


@contextlib.contextmanager
def traced_horizon(horizon: jax.Array) -> Iterator[None]:
    """While tracing inside it, `linear_decay` decays over `horizon` (a traced int32 scalar,
    the run's `config.num_iterations`) instead of the count it is given."""
    token = _HORIZON.set(horizon)
    try:
        yield
    finally:
        _HORIZON.reset(token)


def linear_decay(value: jax.Array, iteration: jax.Array, num_iterations: int) -> jax.Array:
    """`value` at `iteration` of a linear decay to 0 over `num_iterations` (or, while tracing
    inside `traced_horizon`, over its traced horizon)."""
    horizon = _HORIZON.get()
    if horizon is None:  # the reciprocal as XLA takes it of a constant: one rounding
        reciprocal = np.float32(1.0) / np.float32(num_iterations)
    else:
        reciprocal = 1.0 / horizon.astype(jnp.float32)
    return value * (1.0 - iteration.astype(jnp.float32) * reciprocal)
