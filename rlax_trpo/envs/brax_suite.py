"""Brax environments (`brax/<name>`) and the adapter shared with MuJoCo Playground.

Brax's and Playground's environments have the same shape: `reset(rng) -> State` and
`step(state, action) -> State`, where `State` holds the physics state, `obs`, `reward`,
`done` and `info`; neither resets itself nor ends an episode at a time limit unless wrapped.
`from_state_env` adds both, keeping this library's contract:

- `terminated` is the environment's own `done` (a fallen hopper; never set by a time limit);
- `truncated` is the time limit (`episode_length` steps) on a step that did not terminate,
  and, like Brax's `EpisodeWrapper`, it is also recorded in the state's
  `info["truncation"]`;
- `final_obs` is the observation of the step that ended the episode, before the automatic
  reset draws the next start state.

Actions are continuous in [-1, 1] (both suites scale their actuators to it); the policy's
unclipped Gaussian sample is what the trajectory stores, the environment gets it clipped.
Neither suite renders without an OpenGL context, so these environments have no GIF.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.envs.base import Env, EnvSpec, StepResult, snapshot_names
from rlax_trpo.errors import ConfigError

DEFAULT_EPISODE_LENGTH = 1000  # Brax's training default; Playground's configs say their own


class LimitedState(NamedTuple):
    """The wrapped environment's state and the steps taken in its current episode."""

    inner: Any
    steps: jax.Array


def _observation(obs: Any, name: str) -> jax.Array:
    if isinstance(obs, dict):  # Playground's privileged/asymmetric observations
        if "state" not in obs:
            raise ConfigError(f"env: {name} has dict observations without a 'state' entry")
        obs = obs["state"]
    return jnp.asarray(obs, jnp.float32).reshape(-1)


def from_state_env(env: Any, name: str, episode_length: int) -> Env:
    """Adapt a Brax-style environment (`reset(rng)`, `step(state, action)`, `State`)."""
    if episode_length < 1:
        raise ConfigError(f"env_kwargs.episode_length: must be positive (got {episode_length})")
    dims = int(env.action_size)
    probe = jax.eval_shape(env.reset, jax.random.key(0))
    obs_size = _observation(jax.tree.map(jnp.zeros_like, probe.obs), name).shape[0]
    low, high = -jnp.ones((dims,), jnp.float32), jnp.ones((dims,), jnp.float32)
    spec = EnvSpec((obs_size,), False, dims, low, high, episode_length)

    def mark(inner: Any, truncated: jax.Array) -> Any:
        if isinstance(getattr(inner, "info", None), dict) and "truncation" in inner.info:
            info = {**inner.info, "truncation": truncated.astype(inner.info["truncation"].dtype)}
            return inner.replace(info=info)
        return inner

    def reset(key):
        inner = env.reset(key)
        if isinstance(getattr(inner, "info", None), dict):
            inner = inner.replace(info={**inner.info, "truncation": jnp.zeros((), jnp.float32)})
        return _observation(inner.obs, name), LimitedState(inner, jnp.zeros((), jnp.int32))

    def step(key, state, action):
        nxt = env.step(state.inner, jnp.clip(action, low, high))
        steps = state.steps + 1
        terminated = jnp.asarray(nxt.done, jnp.float32) > 0.5
        truncated = (steps >= episode_length) & ~terminated
        nxt = mark(nxt, truncated)
        final_obs = _observation(nxt.obs, name)
        done = terminated | truncated
        _, fresh = reset(key)
        state = jax.tree.map(lambda r, n: jnp.where(done, r, n), fresh, LimitedState(nxt, steps))
        obs = _observation(state.inner.obs, name)
        reward = jnp.asarray(nxt.reward, jnp.float32)
        return StepResult(obs, state, reward, terminated, truncated, final_obs)

    return Env(reset, step, spec, name, None)


# brax's registry of brax 0.14.2 (tests/test_envs.py compares it with the library).
SNAPSHOT = (
    "0.14.2",
    (
        "ant",
        "fast",
        "halfcheetah",
        "hopper",
        "humanoid",
        "humanoidstandup",
        "inverted_double_pendulum",
        "inverted_pendulum",
        "pusher",
        "reacher",
        "swimmer",
        "walker2d",
    ),
)


def live_names() -> list[str]:
    try:
        from brax import envs
    except ImportError:  # the `brax` extra is not installed
        return []
    return sorted(envs._envs)  # brax's registry (envs.register_environment adds to it)


def names() -> list[str]:
    return snapshot_names("brax", "brax.envs", *SNAPSHOT, live_names)


def make(name: str, env_kwargs: dict[str, Any], flatten: bool) -> Env:
    """`brax/<name>`: env_kwargs are Brax's (`backend`, ...) plus `episode_length`."""
    from brax import envs

    kwargs = dict(env_kwargs)
    episode_length = int(kwargs.pop("episode_length", DEFAULT_EPISODE_LENGTH))
    try:
        env = envs.get_environment(name, **kwargs)
    except TypeError as err:
        raise ConfigError(f"env_kwargs: brax/{name} does not take them ({err})") from None
    return from_state_env(env, f"brax/{name}", episode_length)
