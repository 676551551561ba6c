"""The embedded default run, and the YAML configurations shipped inside the package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlax_trpo.errors import ConfigError

# The bundled configurations (`configs/` in a checkout links here), found by name.
CONFIG_DIR = Path(__file__).resolve().parent / "configs"

# What `python train.py` runs with no --config (the same as the bundled `ppo_cartpole`): PPO
# on CartPole-v1 with RL Zoo's tuned settings at lr 5e-4; 8/8 seeds end at 500 by 200k steps.
DEFAULT_CONFIG: dict[str, Any] = {
    "algorithm": "ppo",
    "env": "CartPole-v1",
    "num_envs": 8,
    "num_steps": 32,
    "total_env_steps": 200_000,
    "num_epochs": 20,
    "num_minibatches": 1,
    "anneal_lr": True,
    "advantage": "gae",
    "hidden_sizes": [64, 64],
    "activation": "tanh",
    "hp": {
        "learning_rate": 5e-4,
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "clip_eps": 0.2,
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
    },
}


def bundled_config_names() -> list[str]:
    """The names of the configurations shipped with the package (`ppo_cartpole`, ...)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def find_config(name_or_path: str | Path) -> Path:
    """A YAML file: a path that exists, else a bundled configuration by name (with or without
    `.yaml`), from any working directory. Unknown names raise a one-line ConfigError."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.parent == Path(".") and path.suffix in ("", ".yaml"):
        bundled = CONFIG_DIR / f"{path.stem}.yaml"
        if bundled.is_file():
            return bundled
        names = ", ".join(bundled_config_names())
        raise ConfigError(
            f"config {str(name_or_path)!r} is neither a file nor a bundled config ({names})"
        )
    raise ConfigError(f"config file {str(path)!r} does not exist")
