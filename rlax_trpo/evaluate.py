"""Vmappable evaluation episodes with the greedy (mode) or the sampling policy."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from rlax_trpo.config import Config
from rlax_trpo.envs import Env
from rlax_trpo.networks import Networks
from rlax_trpo.rollout import reset_envs
from rlax_trpo.types import TrainState


def make_evaluate(
    config: Config, env: Env, networks: Networks, num_episodes: int, greedy: bool = True,
    max_steps: int | None = None,
) -> Callable[[TrainState, jax.Array], jax.Array]:
    """`evaluate(state, key) -> returns [num_episodes]`: one full episode per parallel env.

    Each env runs until its first episode ends (terminated or truncated) or `max_steps`
    (default: the environment's time limit) pass; rewards after the first end are ignored.
    Observations get the run's frozen normalisation when `config.normalize_obs`.
    """
    horizon = max_steps or env.spec.max_episode_steps or 1000
    step_env = jax.vmap(env.step)

    def evaluate(state: TrainState, key: jax.Array) -> jax.Array:
        k_reset, k_run = jax.random.split(key)
        obs, env_state = reset_envs(env, k_reset, num_episodes)

        def transform(o):
            return state.obs_stats.normalize(o) if config.normalize_obs else o

        def step(carry, step_key):
            env_state, obs, total, alive = carry
            k_act, k_env = jax.random.split(step_key)
            dist = networks.policy(state.params.policy, transform(obs))
            action = dist.mode() if greedy else dist.sample(seed=k_act)
            res = step_env(jax.random.split(k_env, num_episodes), env_state, action)
            total = total + jnp.where(alive, res.reward, 0.0)
            alive = alive & ~(res.terminated | res.truncated)
            return (res.state, res.obs, total, alive), None

        init = (env_state, obs, jnp.zeros(num_episodes), jnp.ones(num_episodes, bool))
        (_, _, total, _), _ = jax.lax.scan(step, init, jax.random.split(k_run, horizon))
        return total

    return evaluate
