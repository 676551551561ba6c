"""The environment contract every suite is adapted to (gymnax 1.0's, as pure functions).

`Env.step` auto-resets and returns `terminated` and `truncated` apart, and `final_obs`, the
observation before the automatic reset, so truncated steps bootstrap from V(final_obs).
An adapter may also give `Env.transition`, the same step without the reset: the rollout's
`reset_ratio` option resets finished environments from a shared pool of fresh states with
it (`rlax_trpo.rollout.pooled_step`), for suites whose reset costs many steps (Craftax's
world generation, Jumanji's mazes).

An environment with invalid actions gives `Env.action_mask(state) -> bool [num_actions]`,
the legal actions in the state its observation comes from (Jumanji's `action_mask`, a user
environment's own): the policy then samples, scores and takes its entropy and KL over the
legal actions only (`rlax_trpo.networks.masked`). It is a function of the state, not a
field of the step's result, so it holds after an automatic reset, after a pooled reset and
in a state the vine restores, with nothing more to carry; without one nothing is computed.
"""

from __future__ import annotations

import importlib.metadata
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.errors import ConfigError


class EnvSpec(NamedTuple):
    """Static facts about an environment's spaces (host-side Python values)."""

    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int  # categories if discrete, action dimensions if continuous
    action_low: Any = None  # float array `[num_actions]` (continuous only)
    action_high: Any = None
    max_episode_steps: int = 0
    masked: bool = False  # the environment gives `Env.action_mask` (discrete actions only)
    # ((name, shape), ...): the fields of a structured observation, in the order the flat
    # vector holds them (Jumanji's); () for an observation that is one array.
    obs_fields: tuple = ()


class StepResult(NamedTuple):
    obs: jax.Array
    state: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array
    # Figures of the episode that ends at this step (e.g. achievements unlocked), name ->
    # scalar, read only where the step ends an episode; None for environments without any.
    # The training loop logs their sums over finished episodes as `episode/<name>_sum`.
    info: Any = None


class Env(NamedTuple):
    """Pure functions over a single environment instance (vmap them for a batch).

    reset(key) -> (obs, state)
    step(key, state, action) -> StepResult (auto-resets; `final_obs` is pre-reset)
    render: optional host function `(env_states, returns, path)` writing a GIF of recorded
      states (`train.py eval --gif`); None where the suite cannot render.
    transition(key, state, action) -> StepResult without the automatic reset (`obs` is
      `final_obs`, `state` the state after the step, even where the episode ended); None
      where the suite has no such step (then `reset_ratio` is refused).
    action_mask(state) -> bool `[num_actions]`: the actions legal in `state` (the state
      `reset` or `step` returned with the observation); None: every action is legal.
    """

    reset: Callable[[jax.Array], tuple[jax.Array, Any]]
    step: Callable[[jax.Array, Any, jax.Array], StepResult]
    spec: EnvSpec
    name: str
    render: Callable[[list, Any, str], None] | None = None
    transition: Callable[[jax.Array, Any, jax.Array], StepResult] | None = None
    action_mask: Callable[[Any], jax.Array] | None = None


def legal_actions(env: Env, states: Any) -> jax.Array | None:
    """The action masks `[B, num_actions]` (bool) of a batch of `states` `[B, ...]`, or None
    for an environment without one."""
    if env.action_mask is None:
        return None
    return jax.vmap(lambda s: jnp.asarray(env.action_mask(s), bool))(states)


def check_action_mask(env: Env) -> Env:
    """`env` with its `spec.masked` set from `env.action_mask`, which is checked: one-line
    ConfigErrors for a mask on continuous actions or one of the wrong shape."""
    if env.action_mask is None:
        if env.spec.masked:
            raise ConfigError(f"env: {env.name}'s spec says masked but it has no action_mask")
        return env
    if not env.spec.discrete:
        raise ConfigError(
            f"env: {env.name} gives an action mask, but its actions are continuous "
            "(masks are for discrete actions)"
        )
    _, state = jax.eval_shape(env.reset, jax.random.key(0))
    shape = tuple(jax.eval_shape(env.action_mask, state).shape)
    if shape != (env.spec.num_actions,):
        raise ConfigError(
            f"env: {env.name}'s action mask has shape {shape}; it must be "
            f"({env.spec.num_actions},), one entry per action"
        )
    return env._replace(spec=env.spec._replace(masked=True))


def without_action_mask(env: Env) -> Env:
    """`env` with every action legal (`mask_actions: false`): its mask is not computed."""
    return env._replace(action_mask=None, spec=env.spec._replace(masked=False))


def auto_reset(
    transition: Callable[[jax.Array, Any, jax.Array], StepResult],
    reset: Callable[[jax.Array], tuple[jax.Array, Any]],
) -> Callable[[jax.Array, Any, jax.Array], StepResult]:
    """The auto-resetting `step` of a `transition`: where the step ends an episode, the
    observation and state are a fresh `reset`'s (`final_obs` keeps the pre-reset one)."""

    def step(key: jax.Array, state: Any, action: jax.Array) -> StepResult:
        k_step, k_reset = jax.random.split(key)
        res = transition(k_step, state, action)
        done = jnp.logical_or(res.terminated, res.truncated)
        obs0, state0 = reset(k_reset)
        pick = lambda fresh, old: jax.tree.map(lambda f, o: jnp.where(done, f, o), fresh, old)
        return res._replace(obs=pick(obs0, res.obs), state=pick(state0, res.state))

    return step


def map_observations(env: Env, fn: Any, obs_shape: tuple[int, ...], name: str | None = None) -> Env:
    """`env` whose every observation (reset, step and the pre-reset `final_obs`) goes through
    `fn`, giving observations of `obs_shape`."""

    def reset(key: jax.Array) -> tuple[jax.Array, Any]:
        obs, state = env.reset(key)
        return fn(obs), state

    def mapped(inner_step):
        def step(key: jax.Array, state: Any, action: jax.Array) -> StepResult:
            res = inner_step(key, state, action)
            return res._replace(obs=fn(res.obs), final_obs=fn(res.final_obs))

        return step

    spec = env.spec._replace(obs_shape=tuple(obs_shape))
    transition = None if env.transition is None else mapped(env.transition)
    return env._replace(
        reset=reset,
        step=mapped(env.step),
        spec=spec,
        name=name or env.name,
        transition=transition,
    )


def flatten_observations(env: Env) -> Env:
    """`env` with each observation reshaped to a float32 vector (for an MLP); a vector
    observation is returned as it was."""
    if len(env.spec.obs_shape) == 1:
        return env
    size = math.prod(int(d) for d in env.spec.obs_shape)
    return map_observations(env, lambda obs: jnp.asarray(obs, jnp.float32).reshape(size), (size,))


def snapshot_names(
    distribution: str,
    module: str,
    version: str,
    names: Sequence[str],
    live: Callable[[], list[str]],
) -> list[str]:
    """The environment names a suite's library registers, cheaply.

    `names` is a snapshot of `live()` taken under `version` of the installed `distribution`:
    while that version is installed and `module` (the library's registry) is not imported
    yet, nobody can have registered more, so the snapshot is the answer and nothing heavy is
    imported (an unknown name fails in well under a second). Otherwise `live()` asks the
    library itself; a library that is not installed has no names.

    Importing a suite's library can start JAX's backend (gymnax's does), so before `live()`
    imports one the host is set up as a run sets it up (`platform.setup_cpu_for_run`).
    """
    if module not in sys.modules:
        try:
            installed = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            return []
        if installed == version:
            return list(names)
        from rlax_trpo import platform

        platform.setup_cpu_for_run()
    return live()
