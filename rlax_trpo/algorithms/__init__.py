"""The algorithm registry: the one list of algorithm names, and `make_algorithm`.

Built-in methods are named by `"module:factory"` strings and imported on first use, so this
module imports nothing heavy and `Config` validates `algorithm:` against it. A user adds a
method from outside the package with `register_algorithm(name, factory)`, where
`factory(config, networks) -> Algorithm` (the record in `rlax_trpo.algorithms.base`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlax_trpo.errors import ConfigError

# name -> factory, or "module:attribute" of a factory (imported on first use).
_REGISTRY: dict[str, Callable[..., Any] | str] = {
    "ppo": "rlax_trpo.algorithms.ppo:make_ppo",
    "trpo": "rlax_trpo.algorithms.trpo:make_trpo",
    "npg": "rlax_trpo.algorithms.trpo:make_npg",
    "vpg": "rlax_trpo.algorithms.vpg:make_vpg",
    "grpo": "rlax_trpo.algorithms.grpo:make_grpo",
}


def register_algorithm(name: str, factory: Callable[..., Any] | str) -> None:
    """Add (or replace) an algorithm: `factory(config, networks) -> Algorithm`, or its
    `"module:attribute"` path. Host-side; call it before building a `Config` that names it."""
    if not isinstance(name, str) or not name:
        raise ValueError("register_algorithm: the name must be a non-empty string")
    _REGISTRY[name] = factory


def algorithm_names() -> list[str]:
    """Every registered algorithm name, built-in first."""
    return list(_REGISTRY)


def get_factory(name: str) -> Callable[..., Any]:
    """The factory registered under `name`; a one-line ConfigError listing the names if none."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"algorithm: unknown {name!r}; allowed: {', '.join(_REGISTRY)}") from None
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory


def make_algorithm(config: Any, networks: Any) -> Any:
    """Build the `Algorithm` named by `config.algorithm` for `networks`."""
    return get_factory(config.algorithm)(config, networks)


__all__ = ["algorithm_names", "get_factory", "make_algorithm", "register_algorithm"]
