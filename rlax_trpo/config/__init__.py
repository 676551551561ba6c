"""Configuration: the fields a configuration is made of, the algorithm registry, YAML files
and overrides, plugins, the bundled configurations, sweeps, and `Config` itself.

    config = Config.create(algorithm="trpo", env="Acrobot-v1", cg_iters=15)
    config = load_config("ppo_cartpole", ["num_envs=16", "hp.learning_rate=1e-3"])

This floor imports only the ground floor and `rlax_trpo.envs` (an environment's name is
checked against its suite): the algorithms register here by `"module:attribute"` strings,
so validating a configuration imports the one algorithm it names and nothing else.

    fields         `HParams`, `Section`, the fields of every run (`RunFields`, `ControlFields`)
    registry       `AlgorithmSpec`, `register_algorithm`, the built-in names
    configuration  `Config`, `load_config`, `config_from_dict`: validation and loading
    yamlio         YAML files and `key=value` overrides, read into plain dicts
    defaults       the bundled configurations, found by name
    plugins        a user's modules (`--import`, `imports:`, entry points)
    sweep          `--sweep` settings, the population's hyperparameters and keys
"""

from rlax_trpo.config.configuration import (
    Config,
    config_from_dict,
    config_model,
    load_config,
    validate_config,
)
from rlax_trpo.config.fields import (
    DEFAULT_ALGORITHM,
    ControlFields,
    ControlHParams,
    HParams,
    RunFields,
    Section,
    hp_field,
    hparams_model,
    validate_model,
)
from rlax_trpo.config.yamlio import merge_overrides, parse_overrides, read_yaml

__all__ = [
    "DEFAULT_ALGORITHM",
    "Config",
    "ControlFields",
    "ControlHParams",
    "HParams",
    "RunFields",
    "Section",
    "config_from_dict",
    "config_model",
    "hp_field",
    "hparams_model",
    "load_config",
    "merge_overrides",
    "parse_overrides",
    "read_yaml",
    "validate_config",
    "validate_model",
]
