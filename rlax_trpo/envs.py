"""Environments: gymnax 1.0 by name, with flattened observations and running normalisers.

`make_env(name)` returns an `Env` of pure functions over one environment; the rollout vmaps
them. The gymnax 1.0 contract is kept: `step` returns `terminated` and `truncated` apart, and
`final_obs`, the observation before the automatic reset (gymnax's
`info["final_observation"]`), so truncated steps can bootstrap from V(final_obs).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import gymnax
import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from rlax_trpo.errors import ConfigError

# Environments of this library's own, written as gymnax environments: name -> factory
# returning (env, env_params). Other modules register theirs with `register_env`.
_CUSTOM_ENVS: dict[str, Callable[..., tuple[Any, Any]]] = {}


def register_env(name: str, factory: Callable[..., tuple[Any, Any]]) -> None:
    """Register a gymnax-style environment factory under `name` (host-side, idempotent)."""
    _CUSTOM_ENVS[name] = factory


def _custom_envs() -> dict[str, Callable[..., tuple[Any, Any]]]:
    # Import lazily so that importing rlax_trpo has no side effects.
    import rlax_trpo.custom_envs  # noqa: F401  (registers on import)

    return _CUSTOM_ENVS


def valid_env_names() -> list[str]:
    return list(gymnax.registered_envs) + sorted(_custom_envs())


def check_env_name(name: str) -> None:
    """Raise a one-line ConfigError listing the valid names if `name` is unknown."""
    names = valid_env_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"env: unknown environment {name!r}{hint}; valid names: {', '.join(names)}"
        )


class EnvSpec(NamedTuple):
    """Static facts about an environment's spaces (host-side Python values)."""

    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int  # categories if discrete, action dimensions if continuous
    action_low: Any = None  # float array `[num_actions]` (continuous only)
    action_high: Any = None
    max_episode_steps: int = 0


class Env(NamedTuple):
    """Pure functions over a single environment instance (vmap them for a batch).

    reset(key) -> (obs, state)
    step(key, state, action) -> StepResult (auto-resets; `final_obs` is pre-reset)
    """

    reset: Callable[[jax.Array], tuple[jax.Array, Any]]
    step: Callable[[jax.Array, Any, jax.Array], StepResult]
    spec: EnvSpec
    name: str


class StepResult(NamedTuple):
    obs: jax.Array
    state: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array


def make_env(name: str, env_kwargs: dict[str, Any] | None = None, flatten: bool = True) -> Env:
    """Build an `Env` for a gymnax (or registered) environment.

    Args:
      name: a gymnax registered name (`CartPole-v1`, `Breakout-MinAtar`, ...) or one of this
        library's own environments.
      env_kwargs: fields of the environment's `EnvParams` to replace (e.g.
        `max_steps_in_episode`).
      flatten: flatten observations to vectors (MLP); False keeps images (CNN).
    """
    check_env_name(name)
    if name in _custom_envs():
        gym_env, params = _custom_envs()[name]()
    else:
        gym_env, params = gymnax.make(name)
    if env_kwargs:
        unknown = sorted(set(env_kwargs) - set(vars(params)))
        if unknown:
            raise ConfigError(
                f"env_kwargs.{unknown[0]}: not a parameter of {name}; allowed: "
                f"{', '.join(sorted(vars(params)))}"
            )
        params = params.replace(**env_kwargs)

    obs_space = gym_env.observation_space(params)
    raw_shape = tuple(int(d) for d in obs_space.shape)
    obs_shape = (int(jnp.prod(jnp.array(raw_shape))),) if flatten else raw_shape
    act_space = gym_env.action_space(params)
    if isinstance(act_space, spaces.Discrete):
        spec = EnvSpec(obs_shape, True, int(act_space.n))
        to_env_action = lambda a: a
    elif isinstance(act_space, spaces.Box):
        shape = tuple(act_space.shape) or (1,)
        dims = int(jnp.prod(jnp.array(shape)))
        low = jnp.broadcast_to(jnp.asarray(act_space.low, jnp.float32), (dims,))
        high = jnp.broadcast_to(jnp.asarray(act_space.high, jnp.float32), (dims,))
        spec = EnvSpec(obs_shape, False, dims, low, high)
        act_shape = tuple(act_space.shape)
        # The policy's unclipped Gaussian sample is stored; the env gets it clipped.
        to_env_action = lambda a: jnp.clip(a, low, high).reshape(act_shape)
    else:
        raise ConfigError(f"env: {name} has an unsupported action space {type(act_space).__name__}")
    spec = spec._replace(max_episode_steps=int(getattr(params, "max_steps_in_episode", 0)))

    def prep(obs):
        obs = jnp.asarray(obs, jnp.float32)
        return obs.reshape(obs_shape)

    def reset(key):
        obs, state = gym_env.reset(key, params)
        return prep(obs), state

    def step(key, state, action):
        obs, state, reward, terminated, truncated, info = gym_env.step(
            key, state, to_env_action(action), params
        )
        return StepResult(
            prep(obs),
            state,
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, bool),
            jnp.asarray(truncated, bool),
            prep(info["final_observation"]),
        )

    return Env(reset, step, spec, name)


@flax.struct.dataclass
class RunningMeanStd:
    """Running mean and variance (Chan et al. parallel update), for obs and return scaling."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def create(cls, shape: tuple[int, ...] = ()) -> RunningMeanStd:
        return cls(jnp.zeros(shape), jnp.ones(shape), jnp.asarray(1e-4))

    def update(self, batch: jax.Array) -> RunningMeanStd:
        """Fold in `batch` of shape `[N, *shape]`."""
        b_mean, b_var = batch.mean(axis=0), batch.var(axis=0)
        n = batch.shape[0]
        delta = b_mean - self.mean
        total = self.count + n
        mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / total
        return RunningMeanStd(mean, m2 / total, total)

    def normalize(self, x: jax.Array, clip: float = 10.0) -> jax.Array:
        return jnp.clip((x - self.mean) / jnp.sqrt(self.var + 1e-8), -clip, clip)

    def scale(self, x: jax.Array, clip: float = 10.0) -> jax.Array:
        """Divide by the std without centring (reward scaling)."""
        return jnp.clip(x / jnp.sqrt(self.var + 1e-8), -clip, clip)


def discounted_return_trace(
    acc: jax.Array, rewards: jax.Array, dones: jax.Array, gamma: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Running discounted return per env, the statistic reward scaling divides by.

    Args:
      acc: `[B]` carried return at the start of the rollout.
      rewards, dones: `[T, B]`.

    Returns:
      (final acc `[B]`, returns `[T, B]`) with ret_t = gamma * ret_{t-1} * (1 - done_{t-1}) + r_t.
    """

    def step(carry, xs):
        r, d = xs
        ret = carry * gamma + r
        return ret * (1.0 - d), ret

    return jax.lax.scan(step, acc, (rewards, dones.astype(jnp.float32)))
