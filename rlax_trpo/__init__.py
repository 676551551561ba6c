"""rlax_trpo: policy optimisation (VPG, NPG, TRPO, PPO, GRPO) compiled end to end in JAX.

The public names below load on first use (PEP 562), so `import rlax_trpo.platform` does not
import gymnax, which starts JAX's backends at import: `rlax_trpo.platform` must run first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Algorithm": "rlax_trpo.algorithms.base",
    "algorithm_names": "rlax_trpo.config.registry",
    "make_algorithm": "rlax_trpo.algorithms",
    "register_algorithm": "rlax_trpo.config.registry",
    "RunResult": "rlax_trpo.experiment.driver",
    "run": "rlax_trpo.experiment.driver",
    "Config": "rlax_trpo.config.configuration",
    "HParams": "rlax_trpo.config.fields",
    "load_config": "rlax_trpo.config.configuration",
    "Env": "rlax_trpo.envs",
    "EnvSpec": "rlax_trpo.envs",
    "make_env": "rlax_trpo.envs",
    "register_env": "rlax_trpo.envs",
    "register_suite": "rlax_trpo.envs",
    "register_network": "rlax_trpo.layers",
    "ConfigError": "rlax_trpo.errors",
    "Networks": "rlax_trpo.networks",
    "Policy": "rlax_trpo.policy",
    "load_policy": "rlax_trpo.experiment.saved",
    "make_networks": "rlax_trpo.networks",
    "Trainer": "rlax_trpo.training",
    "make_train": "rlax_trpo.training",
    "make_trainer": "rlax_trpo.training",
    "Batch": "rlax_trpo.types",
    "Params": "rlax_trpo.types",
    "TrainState": "rlax_trpo.types",
    "Trajectory": "rlax_trpo.types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlax_trpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # for type checkers and IDEs
    from rlax_trpo.algorithms import make_algorithm  # noqa: F401
    from rlax_trpo.algorithms.base import Algorithm  # noqa: F401
    from rlax_trpo.config.configuration import Config, load_config  # noqa: F401
    from rlax_trpo.config.fields import HParams  # noqa: F401
    from rlax_trpo.config.registry import algorithm_names, register_algorithm  # noqa: F401
    from rlax_trpo.envs import Env, EnvSpec, make_env, register_env, register_suite  # noqa: F401
    from rlax_trpo.errors import ConfigError  # noqa: F401
    from rlax_trpo.experiment.driver import RunResult, run  # noqa: F401
    from rlax_trpo.experiment.saved import load_policy  # noqa: F401
    from rlax_trpo.layers import register_network  # noqa: F401
    from rlax_trpo.networks import Networks, make_networks  # noqa: F401
    from rlax_trpo.policy import Policy  # noqa: F401
    from rlax_trpo.training import Trainer, make_train, make_trainer  # noqa: F401
    from rlax_trpo.types import Batch, Params, TrainState, Trajectory  # noqa: F401
