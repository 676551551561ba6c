"""The `Algorithm` interface: a record of pure functions built by a `make_*` factory.

Every method is a NamedTuple of pure functions (optax's `GradientTransformation` idea); the
training loop does not know which one it runs:

    algo_state = algorithm.init(params, hp)
    trajectory = (algorithm.collect or rollout.collect)(env, policy, carry, key, num_steps)
    batch = algorithm.make_batch(params, trajectory, hp)
    params, algo_state, metrics = algorithm.update(params, algo_state, batch, hp, key)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from rlax_trpo.config.fields import HParams
from rlax_trpo.config.registry import AlgorithmSpec
from rlax_trpo.rollout import Collect
from rlax_trpo.types import Metrics, Params, Trajectory


class Algorithm(NamedTuple):
    """A policy-optimisation method.

    Attributes:
      init: `(params, hp) -> algo_state`.
      make_batch: `(params, trajectory, hp) -> batch` (advantages, targets, masks).
      update: `(params, algo_state, batch, hp, key) -> (params, algo_state, metrics)`.
      collect: the rollout, with `rollout.collect`'s signature; None means the standard
        continuing rollout (GRPO collects groups from copied start states instead). Its
        result's trajectory may be a record of the algorithm's own (the vine's branches
        beside the path) with a `Trajectory`'s `obs`, `reward` and `normalized`;
        `make_batch` then receives that record's learner view.
      critic: whether the method learns a value network; without one `Params.value` is None.
      check_env: optional host-side `(env) -> None`, called once with the environment when
        the trainer is built, before any tracing (e.g. GRPO warns of a horizon shorter than
        the episode limit).
      extra_env_steps: environment steps an iteration spends beyond its rollout's
        `num_envs x num_steps` (the vine's branches), counted against `total_env_steps`.
    """

    init: Callable[[Params, HParams], Any]
    make_batch: Callable[[Params, Trajectory, HParams], Any]
    update: Callable[[Params, Any, Any, HParams, jax.Array], tuple[Params, Any, Metrics]]
    collect: Collect | None = None
    critic: bool = True
    check_env: Callable[[Any], None] | None = None
    extra_env_steps: int = 0


__all__ = ["Algorithm", "AlgorithmSpec"]
