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

from rlax_trpo.fields import HParams
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


class AlgorithmSpec(NamedTuple):
    """An algorithm's registry entry: how to build it and the configuration it reads.

    Attributes:
      make: `make(config, networks) -> Algorithm` (or its `"module:attribute"` path); None
        for a kind whose `program` builds everything itself (the language-model GRPO).
      fields: the `Section` of static fields this algorithm reads beyond `base`'s.
      hparams: the `HParams` subclass of the hyperparameters it reads (`hp:`).
      base: the fields shared by every algorithm of its kind (`ControlFields`).
      program: `program(config, progress) -> Program`, what a run compiles and drives (or
        its `"module:attribute"` path).
      memory: whether its update reads memory networks' batches (whole sequences, through
        `rlax_trpo.algorithms.common.BatchLayout` and `rlax_trpo.networks.policy_on`); a
        config asking for `memory` with an algorithm that does not is refused.
    """

    make: Any
    fields: type
    hparams: type
    base: type
    program: Any = "rlax_trpo.program:control_program"
    memory: bool = False

    @classmethod
    def control(
        cls,
        make: Any,
        fields: type | None = None,
        hparams: type | None = None,
        base: type | None = None,
        program: Any = None,
        memory: bool = False,
    ) -> AlgorithmSpec:
        """A control algorithm's entry; omitted parts default to no fields of its own, the
        discount as its only hyperparameter, `ControlFields`, the control program and no
        memory networks."""
        from rlax_trpo.fields import ControlFields, ControlHParams, Section

        return cls(
            make,
            fields or Section,
            hparams or ControlHParams,
            base or ControlFields,
            program or "rlax_trpo.program:control_program",
            memory,
        )
