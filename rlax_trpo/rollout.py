"""Rollout collection with `lax.scan`: time-major `[T, B]`, both end flags, pre-reset obs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.envs import Env
from rlax_trpo.networks import Networks
from rlax_trpo.types import EpisodeStats, Trajectory


class RolloutResult(NamedTuple):
    trajectory: Trajectory  # raw (unnormalised) observations, `[T, B, ...]`
    env_state: Any
    obs: jax.Array  # `[B, ...]` observation to continue from
    episode: EpisodeStats
    finished_return: jax.Array  # `[T, B]` return of the episode that ended at t, else 0
    finished_length: jax.Array  # `[T, B]`
    done: jax.Array  # `[T, B]` terminated | truncated


def reset_envs(env: Env, key: jax.Array, num_envs: int) -> tuple[jax.Array, Any]:
    """Batched reset: `[B, ...]` observations and states."""
    return jax.vmap(env.reset)(jax.random.split(key, num_envs))


def collect(
    env: Env,
    networks: Networks,
    policy_params: Any,
    env_state: Any,
    obs: jax.Array,
    episode: EpisodeStats,
    key: jax.Array,
    num_steps: int,
    obs_transform: Callable[[jax.Array], jax.Array] = lambda o: o,
) -> RolloutResult:
    """Run the sampling policy for `num_steps` steps in every environment.

    `obs_transform` (e.g. running normalisation with frozen statistics) is applied to what
    the policy sees; the trajectory stores raw observations so the learner applies the very
    same transform and recovers the rollout log-probabilities exactly.
    """
    num_envs = obs.shape[0]
    step_env = jax.vmap(env.step)

    def step(carry, step_key):
        env_state, obs, episode = carry
        k_act, k_env = jax.random.split(step_key)
        dist = networks.policy(policy_params, obs_transform(obs))
        action, log_prob = dist.sample_and_log_prob(seed=k_act)
        res = step_env(jax.random.split(k_env, num_envs), env_state, action)
        done = jnp.logical_or(res.terminated, res.truncated)
        ep_return = episode.episode_return + res.reward
        ep_length = episode.episode_length + 1
        new_episode = EpisodeStats(jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length))
        transition = Trajectory(
            obs, action, log_prob, res.reward, res.terminated, res.truncated, res.final_obs
        )
        logs = (jnp.where(done, ep_return, 0.0), jnp.where(done, ep_length, 0), done)
        return (res.state, res.obs, new_episode), (transition, logs)

    (env_state, obs, episode), (traj, (ret, length, done)) = jax.lax.scan(
        step, (env_state, obs, episode), jax.random.split(key, num_steps)
    )
    return RolloutResult(traj, env_state, obs, episode, ret, length, done)
