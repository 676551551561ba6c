"""The algorithms: one file per method (ppo, trpo with npg, vpg, grpo), the `Algorithm`
interface (`base`), the toolbox they share (`common`, `sections`) and the estimators that
collect their own rollouts (the vine, GRPO's groups).

The registry of names lives one floor down (`rlax_trpo.config.registry`, so that a
configuration is validated without importing any algorithm); its public names are here too.
"""

from __future__ import annotations

from typing import Any

from rlax_trpo.config.registry import (
    AlgorithmSpec,
    algorithm_names,
    get_spec,
    register_algorithm,
    resolve,
)


def make_algorithm(config: Any, networks: Any) -> Any:
    """Build the `Algorithm` named by `config.algorithm` for `networks`."""
    return resolve(get_spec(config.algorithm).make)(config, networks)


__all__ = [
    "AlgorithmSpec",
    "algorithm_names",
    "get_spec",
    "make_algorithm",
    "register_algorithm",
    "resolve",
]
