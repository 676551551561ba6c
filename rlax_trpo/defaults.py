"""The embedded default run."""

from __future__ import annotations

from typing import Any

# What `python train.py` runs with no --config (the same as configs/ppo_cartpole.yaml): PPO
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
