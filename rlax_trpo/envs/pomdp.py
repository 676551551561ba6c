"""Partially observed control: `pomdp/<name>` is a gymnax task whose velocities are hidden.

    make_env("pomdp/CartPole-v1")   observation (cart position, pole angle)
    make_env("pomdp/Acrobot-v1")    (cos, sin) of both joint angles, no angular velocities
    make_env("pomdp/Pendulum-v1")   (cos, sin) of the angle, no angular velocity

The dynamics, rewards and episode ends are the task's own; only the observation loses the
entries listed below, so a policy must infer velocities from what it saw before (a memory
policy, `memory: gru | lstm`). Velocity-free CartPole is the partially observed task of
PureJaxRL's recurrent PPO and of POPGym's "stateless" classic-control variants.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from rlax_trpo.envs.base import Env, map_observations

# The observation entries kept (gymnax's observation layouts).
KEPT: dict[str, tuple[int, ...]] = {
    "CartPole-v1": (0, 2),  # x, x_dot, theta, theta_dot
    "Acrobot-v1": (0, 1, 2, 3),  # cos t1, sin t1, cos t2, sin t2, dt1, dt2
    "Pendulum-v1": (0, 1),  # cos theta, sin theta, theta_dot
}


def names() -> list[str]:
    return sorted(KEPT)


def hide(env: Env, kept: tuple[int, ...]) -> Env:
    """`env` observing only the entries `kept` of its (vector) observation."""
    index = jnp.asarray(kept)
    pick = lambda obs: jnp.take(obs, index, axis=-1)
    return map_observations(env, pick, (len(kept),), name=f"pomdp/{env.name}")


def make(name: str, env_kwargs: dict[str, Any], flatten: bool) -> Env:
    from rlax_trpo.envs.gymnax_suite import make as make_gymnax

    return hide(make_gymnax(name, env_kwargs, flatten), KEPT[name])
