"""Algorithm registry: `make_algorithm(config, networks)` dispatches on `config.algorithm`."""

from __future__ import annotations

import importlib

from rlax_trpo.algorithms.base import Algorithm
from rlax_trpo.errors import ConfigError

# name -> (module, factory). Modules are imported on first use.
REGISTRY: dict[str, tuple[str, str]] = {
    "ppo": ("rlax_trpo.algorithms.ppo", "make_ppo"),
    "trpo": ("rlax_trpo.algorithms.trpo", "make_trpo"),
    "npg": ("rlax_trpo.algorithms.trpo", "make_npg"),
    "vpg": ("rlax_trpo.algorithms.vpg", "make_vpg"),
    "grpo": ("rlax_trpo.algorithms.grpo", "make_grpo"),
}

# Methods without a critic (Params.value is None).
CRITIC_FREE = frozenset({"grpo"})


def make_algorithm(config, networks) -> Algorithm:
    try:
        module_name, factory = REGISTRY[config.algorithm]
    except KeyError:
        raise ConfigError(
            f"algorithm: unknown {config.algorithm!r}; allowed: {', '.join(REGISTRY)}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise ConfigError(
            f"algorithm: {config.algorithm!r} is not available in this version"
        ) from None
    return getattr(module, factory)(config, networks)


__all__ = ["Algorithm", "REGISTRY", "CRITIC_FREE", "make_algorithm"]
