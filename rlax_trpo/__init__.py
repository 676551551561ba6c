"""rlax_trpo: policy optimisation (VPG, NPG, TRPO, PPO, GRPO) compiled end to end in JAX."""

from rlax_trpo.algorithms import Algorithm, make_algorithm
from rlax_trpo.config import Config, HParams, load_config
from rlax_trpo.envs import Env, EnvSpec, make_env
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import Networks, make_networks
from rlax_trpo.training import Trainer, make_train, make_trainer
from rlax_trpo.types import Batch, Params, TrainState, Trajectory

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "Batch",
    "Config",
    "ConfigError",
    "Env",
    "EnvSpec",
    "HParams",
    "Networks",
    "Params",
    "TrainState",
    "Trainer",
    "Trajectory",
    "load_config",
    "make_algorithm",
    "make_env",
    "make_networks",
    "make_train",
    "make_trainer",
]
