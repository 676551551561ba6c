"""The algorithm registry: the one list of algorithm names, their configuration sections,
and `make_algorithm`.

Each entry is an `AlgorithmSpec` (`rlax_trpo.algorithms.base`): the factory, the static
fields and the hyperparameters the method reads (its configuration section), the shared
fields of its kind and the `Program` builder a run uses. Built-in entries are named by
`"module:attribute"` strings and imported on first use, so importing this module imports
nothing heavy. A user adds a method from outside the package with
`register_algorithm(name, make, fields=..., hparams=...)` (see docs/extending.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlax_trpo.errors import ConfigError

# name -> AlgorithmSpec, or "module:attribute" of one (imported on first use).
_REGISTRY: dict[str, Any] = {
    "ppo": "rlax_trpo.algorithms.ppo:SPEC",
    "trpo": "rlax_trpo.algorithms.trpo:TRPO_SPEC",
    "npg": "rlax_trpo.algorithms.trpo:NPG_SPEC",
    "vpg": "rlax_trpo.algorithms.vpg:SPEC",
    "grpo": "rlax_trpo.algorithms.grpo:SPEC",
    "grpo_lm": "rlax_trpo.lm.config:SPEC",
}


def resolve(ref: Any) -> Any:
    """The object a `"module:attribute"` string names (imported now); anything else as is."""
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)
    return ref


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
        control algorithm, `ControlFields` and `rlax_trpo.program.control_program`).
      memory: whether its update reads memory networks' whole sequences (it builds its
        batches with `rlax_trpo.algorithms.common.batch_layout` and reads them with
        `rlax_trpo.networks.policy_on`/`value_on`); without it `memory: gru | lstm` is
        refused for this algorithm.
    """
    from rlax_trpo.algorithms.base import AlgorithmSpec

    if not isinstance(name, str) or not name:
        raise ValueError("register_algorithm: the name must be a non-empty string")
    if isinstance(make, AlgorithmSpec):
        if any(x is not None for x in (fields, hparams, base, program)) or memory:
            raise ValueError("register_algorithm: pass either an AlgorithmSpec or its parts")
        _REGISTRY[name] = make
        return
    _REGISTRY[name] = AlgorithmSpec.control(make, fields, hparams, base, program, memory)


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


def make_algorithm(config: Any, networks: Any) -> Any:
    """Build the `Algorithm` named by `config.algorithm` for `networks`."""
    return resolve(get_spec(config.algorithm).make)(config, networks)


__all__ = ["algorithm_names", "get_spec", "make_algorithm", "register_algorithm", "resolve"]
