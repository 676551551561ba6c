"""Vmappable evaluation episodes with the greedy (mode) or the sampling policy; GIF rendering."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.config import Config
from rlax_trpo.envs import Env
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import Networks
from rlax_trpo.rollout import reset_envs
from rlax_trpo.types import TrainState


def make_evaluate(
    config: Config,
    env: Env,
    networks: Networks,
    num_episodes: int,
    greedy: bool = True,
    max_steps: int | None = None,
) -> Callable[[TrainState, jax.Array], jax.Array]:
    """`evaluate(state, key) -> returns [num_episodes]`: one full episode per parallel env.

    Each env runs until its first episode ends (terminated or truncated) or `max_steps`
    (default: the environment's time limit) pass; rewards after the first end are ignored.
    The loop stops as soon as every episode has ended: a time limit is an upper bound, not
    the cost (Craftax's is 100,000 steps, its episodes a few hundred). Step t takes the t-th
    of `horizon` keys split from the run key, so the returns do not depend on where the loop
    stops. Observations get the run's frozen normalisation when `config.normalize_obs`.
    """
    horizon = max_steps or env.spec.max_episode_steps or 1000
    step_env = jax.vmap(env.step)

    def evaluate(state: TrainState, key: jax.Array) -> jax.Array:
        k_reset, k_run = jax.random.split(key)
        obs, env_state = reset_envs(env, k_reset, num_episodes)

        def transform(o):
            return state.obs_stats.normalize(o) if config.normalize_obs else o

        keys = jax.random.split(k_run, horizon)

        def step(carry):
            t, env_state, obs, total, alive, memory = carry
            k_act, k_env = jax.random.split(keys[t])
            memory, dist = act(networks, state.params.policy, memory, transform(obs))
            action = dist.mode() if greedy else dist.sample(seed=k_act)
            res = step_env(jax.random.split(k_env, num_episodes), env_state, action)
            total = total + jnp.where(alive, res.reward, 0.0)
            alive = alive & ~(res.terminated | res.truncated)
            return t + 1, res.state, res.obs, total, alive, memory

        def running(carry):
            t, alive = carry[0], carry[4]
            return (t < horizon) & alive.any()

        init = (jnp.int32(0), env_state, obs, jnp.zeros(num_episodes),
                jnp.ones(num_episodes, bool), policy_memory(networks, num_episodes))  # fmt: skip
        return jax.lax.while_loop(running, step, init)[3]

    return evaluate


class Episode(NamedTuple):
    """One recorded episode, time-major: env states, rewards and end flags `[T]`."""

    env_state: Any
    reward: jax.Array
    done: jax.Array


def make_episode(
    config: Config,
    env: Env,
    networks: Networks,
    greedy: bool = True,
    max_steps: int | None = None,
) -> Callable[[TrainState, jax.Array], Episode]:
    """`episode(state, key) -> Episode`: one environment, `max_steps` steps, states recorded.

    `state` is one member's TrainState (no population axis). `Episode.env_state[t]` is the
    state the policy acted in at step t; steps after the first `done` are to be dropped.
    """
    horizon = max_steps or env.spec.max_episode_steps or 1000

    def episode(state: TrainState, key: jax.Array) -> Episode:
        k_reset, k_run = jax.random.split(key)
        obs, env_state = env.reset(k_reset)

        def transform(o):
            return state.obs_stats.normalize(o) if config.normalize_obs else o

        def step(carry, step_key):
            env_state, obs, memory = carry
            k_act, k_env = jax.random.split(step_key)
            memory, dist = act(networks, state.params.policy, memory, transform(obs[None]))
            action = (dist.mode() if greedy else dist.sample(seed=k_act))[0]
            res = env.step(k_env, env_state, action)
            return (res.state, res.obs, memory), Episode(
                env_state, res.reward, res.terminated | res.truncated
            )

        init = (env_state, obs, policy_memory(networks, 1))
        _, ep = jax.lax.scan(step, init, jax.random.split(k_run, horizon))
        return ep

    return episode


def policy_memory(networks: Networks, batch: int) -> Any:
    """The policy's initial memory for `batch` episodes (None for a feed-forward policy)."""
    return networks.initial_memory(batch).policy if networks.recurrent else None


def act(networks: Networks, params: Any, memory: Any, obs: jax.Array) -> tuple[Any, Any]:
    """(memory, distribution) of the policy at `obs` `[B, ...]`: each episode evaluated here
    runs until its first end, so its memory starts at the initial state and is never reset."""
    if memory is None and not networks.recurrent:
        return None, networks.policy(params, obs)
    first = jnp.zeros(obs.shape[:1], bool)
    return networks.policy_step(params, memory, obs, first)


def render_gif(env: Env, episode: Episode, path: str | Path) -> int:
    """Render a recorded episode (host arrays) to a GIF with the environment's renderer.

    Frames stop at the first episode end. Returns the number of frames.
    """
    import numpy as np

    if env.render is None:
        raise ConfigError(f"--gif: {env.name} has no renderer")
    done = np.asarray(episode.done)
    length = int(np.argmax(done)) + 1 if done.any() else len(done)
    states = [jax.tree.map(lambda x, t=t: x[t], episode.env_state) for t in range(length)]
    env.render(states, np.cumsum(np.asarray(episode.reward)[:length]), str(path))
    return length
