"""The algorithm registry: the one list of algorithm names and what each reads and builds.

Each entry is an `AlgorithmSpec`: the factory, the static fields and the hyperparameters the
method reads (its configuration section), the shared fields of its kind, the `Program`
builder a run uses, and whether it reads memory networks' batches. Built-in entries are named
by `"module:attribute"` strings and imported on first use (`resolve`), so importing this
module imports no algorithm: a configuration is validated here without the configuration
floor importing the algorithms above it. A user adds a method from outside the package with
`register_algorithm(name, make, fields=..., hparams=...)` (see docs/extending.md);
`rlax_trpo.algorithms` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rlax_trpo.envs.registry import resolve
from rlax_trpo.errors import ConfigError

CONTROL_PROGRAM = "rlax_trpo.experiment.program:control_program"


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
    program: Any = CONTROL_PROGRAM
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
        from rlax_trpo.config.fields import ControlFields, ControlHParams, Section

        return cls(
            make,
            fields or Section,
            hparams or ControlHParams,
            base or ControlFields,
            program or CONTROL_PROGRAM,
            memory,
        )


# name -> AlgorithmSpec, or "module:attribute" of one (imported on first use).
_REGISTRY: dict[str, Any] = {
    "ppo": "rlax_trpo.algorithms.ppo:SPEC",
    "trpo": "rlax_trpo.algorithms.trpo:TRPO_SPEC",
    "npg": "rlax_trpo.algorithms.trpo:NPG_SPEC",
    "vpg": "rlax_trpo.algorithms.vpg:SPEC",
    "grpo": "rlax_trpo.algorithms.grpo:SPEC",
    "grpo_lm": "rlax_trpo.lm.config:SPEC",
}


def register_algorithm(
    name: str,
    make: Callable[..., Any] | str | Any,
    *,
    fields: type | None = None,
    hparams: type | None = None,
    base: type | None = None,
    program: Callable[..., Any] | str | None = None,
    memory: bool = False,
) -> None:
    """Add (or replace) an algorithm.

    Args:
      name: the `algorithm:` value that selects it.
      make: `make(config, networks) -> Algorithm`, its `"module:attribute"` path, or a whole
        `AlgorithmSpec` (then the other arguments must be omitted).
      fields: a `rlax_trpo.config.Section` subclass with the static fields it reads beyond
        the shared ones (default: none).
      hparams: an `HParams` subclass (a `flax.struct.dataclass` of `hp_field`s) with the
        hyperparameters it reads (default: `ControlHParams`, the discount only).
      base, program: the shared fields of its kind and the `Program` builder (default: a
        control algorithm, `ControlFields` and `rlax_trpo.experiment.program.control_program`).
      memory: whether its update reads memory networks' whole sequences (it builds its
        batches with `rlax_trpo.algorithms.common.batch_layout` and reads them with
        `rlax_trpo.networks.policy_on`/`value_on`); without it `memory: gru | lstm` is
        refused for this algorithm.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("register_algorithm: the name must be a non-empty string")
    if isinstance(make, AlgorithmSpec):
        if any(x is not None for x in (fields, hparams, base, program)) or memory:
            raise ValueError("register_algorithm: pass either an AlgorithmSpec or its parts")
        _REGISTRY[name] = make
        return
    _check_parts(fields=fields, hparams=hparams, base=base)
    _REGISTRY[name] = AlgorithmSpec.control(make, fields, hparams, base, program, memory)


def _check_parts(**parts: type | None) -> None:
    """Each part given is a subclass of what it must be: a ValueError naming it otherwise
    (a configuration of the algorithm could not be made of it)."""
    from rlax_trpo.config.fields import HParams, RunFields, Section

    kinds = {"fields": Section, "hparams": HParams, "base": RunFields}
    for part, value in parts.items():
        kind = kinds[part]
        if value is not None and not (isinstance(value, type) and issubclass(value, kind)):
            raise ValueError(
                f"register_algorithm: {part} must be a subclass of rlax_trpo.config."
                f"{kind.__name__} (got {value!r})"
            )


def algorithm_names() -> list[str]:
    """Every registered algorithm name, built-in first."""
    return list(_REGISTRY)


def get_spec(name: str) -> Any:
    """The `AlgorithmSpec` registered under `name`; a one-line ConfigError listing the names
    if there is none."""
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"algorithm: unknown {name!r}; allowed: {', '.join(_REGISTRY)} "
            "(your own: --import MODULE, see docs/extending.md)"
        ) from None
    try:
        return resolve(entry)
    except ImportError as err:
        raise ConfigError(f"algorithm: {name!r} cannot be imported: {err}") from None


__all__ = [
    "AlgorithmSpec",
    "algorithm_names",
    "get_spec",
    "register_algorithm",
    "resolve",
]
