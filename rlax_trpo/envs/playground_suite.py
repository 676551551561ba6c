"""MuJoCo Playground's DM Control Suite tasks (`playground/<Task>`, e.g. CartpoleBalance).

The tasks ship their MJCF files inside the `playground` package (the locomotion and
manipulation robots download mujoco_menagerie at run time, so they are not listed here). The
adapter is `brax_suite.from_state_env`: Playground's `done` is termination, the task's
`episode_length` is the time limit. `env_kwargs` override the task's config
(`episode_length`, `action_repeat`, `ctrl_dt`, ...) and `impl` picks the physics: `jax`
(MJX, the default here: on a CPU it ran CartpoleBalance at about 480k random steps/s against
about 12k for `warp`, 64 envs, 2 cores) or `warp`.
"""

from __future__ import annotations

from typing import Any

from rlax_trpo.envs.base import Env, snapshot_names
from rlax_trpo.envs.brax_suite import from_state_env
from rlax_trpo.errors import ConfigError

# MuJoCo Playground 0.2.0's DM Control Suite (tests/test_envs.py compares it).
SNAPSHOT = (
    "0.2.0",
    (
        "AcrobotSwingup",
        "AcrobotSwingupSparse",
        "BallInCup",
        "CartpoleBalance",
        "CartpoleBalanceSparse",
        "CartpoleSwingup",
        "CartpoleSwingupSparse",
        "CheetahRun",
        "FingerSpin",
        "FingerTurnEasy",
        "FingerTurnHard",
        "FishSwim",
        "HopperHop",
        "HopperStand",
        "HumanoidRun",
        "HumanoidStand",
        "HumanoidWalk",
        "PendulumSwingup",
        "PointMass",
        "ReacherEasy",
        "ReacherHard",
        "SwimmerSwimmer6",
        "WalkerRun",
        "WalkerStand",
        "WalkerWalk",
    ),
)


def live_names() -> list[str]:
    try:
        from mujoco_playground import registry
    except ImportError:  # the `playground` extra is not installed
        return []
    return sorted(registry.dm_control_suite.ALL_ENVS)


def names() -> list[str]:
    return snapshot_names("playground", "mujoco_playground", *SNAPSHOT, live_names)


def make(name: str, env_kwargs: dict[str, Any], flatten: bool) -> Env:
    from mujoco_playground import registry

    config = registry.get_default_config(name)
    overrides = {"impl": "jax", **env_kwargs}
    unknown = sorted(set(overrides) - set(config.keys()))
    if unknown:
        raise ConfigError(
            f"env_kwargs.{unknown[0]}: not a config key of playground/{name}; allowed: "
            f"{', '.join(sorted(config.keys()))}"
        )
    env = registry.load(name, config_overrides=overrides)
    length = int(overrides.get("episode_length", config.episode_length))
    if length < 1:
        raise ConfigError(f"env_kwargs.episode_length: must be positive (got {length})")
    return from_state_env(env, f"playground/{name}", length)
