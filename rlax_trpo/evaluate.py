"""Vmappable evaluation episodes with the greedy (mode) or the sampling policy; GIF rendering."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.config.configuration import Config
from rlax_trpo.envs import Env, legal_actions
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import Networks, masked
from rlax_trpo.normalization import observation_transform
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

        transform = observation_transform(config.normalize_obs, state.obs_stats)

        keys = jax.random.split(k_run, horizon)

        def step(carry):
            t, env_state, obs, total, alive, memory = carry
            k_act, k_env = jax.random.split(keys[t])
            mask = legal_actions(env, env_state)
            memory, dist = act(networks, state.params.policy, memory, transform(obs), mask)
            action = dist.mode() if greedy else dist.sample(seed=k_act)
            res = step_env(jax.random.split(k_env, num_episodes), env_state, action)
            total = total + jnp.where(alive, res.reward, 0.0)
            alive = alive & ~(res.terminated | res.truncated)
            return t + 1, res.state, res.obs, total, alive, memory

        def running(carry):
            t, alive = carry[0], carry[4]
            return (t < horizon) & alive.any()

        init = (
            jnp.int32(0),
            env_state,
            obs,
            jnp.zeros(num_episodes),
            jnp.ones(num_episodes, bool),
            policy_memory(networks, num_episodes),
        )
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
    Every step of the horizon is recorded: for a long time limit, `make_episode_recorder`
    records in chunks and stops after the episode's end.
    """
    recorder = make_episode_recorder(config, env, networks, greedy, max_steps, chunk=None)

    def episode(state: TrainState, key: jax.Array) -> Episode:
        return recorder.advance(state, recorder.start(state, key))[1]

    return episode


class EpisodeRecorder(NamedTuple):
    """One episode recorded `chunk` steps at a time (`make_episode_recorder`)."""

    start: Callable[[TrainState, jax.Array], Any]  # (state, key) -> carry
    advance: Callable[[TrainState, Any], tuple[Any, Episode]]  # -> (carry, next chunk)
    horizon: int
    chunk: int


EPISODE_CHUNK = 500  # steps recorded per call: Craftax's state is 0.27 MB, so 137 MB a chunk


def make_episode_recorder(
    config: Config,
    env: Env,
    networks: Networks,
    greedy: bool = True,
    max_steps: int | None = None,
    chunk: int | None = EPISODE_CHUNK,
) -> EpisodeRecorder:
    """`start(state, key)` and `advance(state, carry) -> (carry, Episode of chunk steps)`: the
    episode `make_episode` records, `chunk` steps per call (None: the whole horizon at once),
    so that a caller can stop once `done` appears instead of holding every state of the time
    limit (Craftax's 100,000 states would take 27 GB). Step t takes the t-th of `horizon` keys
    split from the run key whatever the chunking; steps past the horizon repeat its last key
    and are to be dropped, as are steps after the first `done`."""
    horizon = max_steps or env.spec.max_episode_steps or 1000
    chunk = horizon if chunk is None else min(chunk, horizon)

    def start(state: TrainState, key: jax.Array) -> Any:
        k_reset, k_run = jax.random.split(key)
        obs, env_state = env.reset(k_reset)
        keys = jax.random.split(k_run, horizon)
        return jnp.int32(0), keys, env_state, obs, policy_memory(networks, 1)

    def advance(state: TrainState, carry: Any) -> tuple[Any, Episode]:
        t0, keys, env_state, obs, memory = carry
        transform = observation_transform(config.normalize_obs, state.obs_stats)

        def step(inner, i):
            env_state, obs, memory = inner
            k_act, k_env = jax.random.split(keys[jnp.minimum(t0 + i, horizon - 1)])
            mask = legal_actions(env, jax.tree.map(lambda x: x[None], env_state))
            memory, dist = act(networks, state.params.policy, memory, transform(obs[None]), mask)
            action = (dist.mode() if greedy else dist.sample(seed=k_act))[0]
            res = env.step(k_env, env_state, action)
            return (res.state, res.obs, memory), Episode(
                env_state, res.reward, res.terminated | res.truncated
            )

        inner, ep = jax.lax.scan(step, (env_state, obs, memory), jnp.arange(chunk))
        return (t0 + chunk, keys, *inner), ep

    return EpisodeRecorder(start, advance, horizon, chunk)


def record_episode(recorder: EpisodeRecorder, state: TrainState, key: jax.Array) -> Episode:
    """Host loop over `recorder` (its functions compiled or not): chunks until the first
    `done` or the horizon, as host arrays (typed PRNG keys, e.g. in Jumanji's states, stay
    JAX arrays), at most `horizon` steps long."""
    import numpy as np

    def host(x):
        return x if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else np.asarray(x)

    def join(*parts):
        if jax.dtypes.issubdtype(parts[0].dtype, jax.dtypes.prng_key):
            return jnp.concatenate(parts)[: recorder.horizon]
        return np.concatenate(parts)[: recorder.horizon]

    carry, parts, steps = recorder.start(state, key), [], 0
    while steps < recorder.horizon:
        carry, part = recorder.advance(state, carry)
        parts.append(jax.tree.map(host, part))
        steps += recorder.chunk
        if parts[-1].done.any():
            break
    return jax.tree.map(join, *parts)


def policy_memory(networks: Networks, batch: int) -> Any:
    """The policy's initial memory for `batch` episodes (None for a feed-forward policy)."""
    return None if networks.memory is None else networks.memory.initial(batch).policy


def act(
    networks: Networks, params: Any, memory: Any, obs: jax.Array, action_mask: Any = None
) -> tuple[Any, Any]:
    """(memory, distribution) of the policy at `obs` `[B, ...]`, over the legal actions
    `action_mask` `[B, num_actions]` (None: all): each episode evaluated here runs until its
    first end, so its memory starts at the initial state and is never reset."""
    if networks.memory is None:
        return None, masked(networks.policy(params, obs), action_mask)
    first = jnp.zeros(obs.shape[:1], bool)
    memory, dist = networks.memory.policy_step(params, memory, obs, first)
    return memory, masked(dist, action_mask)


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
