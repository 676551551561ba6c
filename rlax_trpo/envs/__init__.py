"""Environments: the contract (`Env`, `EnvSpec`), the registry, and the built-in suites.

gymnax by name (`CartPole-v1`), this library's own environments (`MaxDigit-qa`), and
whatever a user registers with `register_env` / `register_suite`.
"""

from rlax_trpo.envs.base import Env, EnvSpec, StepResult, legal_actions, without_action_mask
from rlax_trpo.envs.registry import (
    check_env_name,
    make_env,
    register_env,
    register_suite,
    valid_env_names,
)

__all__ = [
    "Env",
    "EnvSpec",
    "StepResult",
    "check_env_name",
    "legal_actions",
    "make_env",
    "register_env",
    "register_suite",
    "valid_env_names",
    "without_action_mask",
]
