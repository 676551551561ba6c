"""Jumanji environments (`jumanji/<Name>`, e.g. Snake-v1, Maze-v0, Game2048-v1).

Jumanji follows dm_env: `reset(key) -> (state, timestep)`, `step(state, action) ->
(state, timestep)`, where a `TimeStep` carries `step_type` (FIRST, MID, LAST), `reward`,
`discount` and a structured observation; an episode ends on LAST, and its discount tells
how: 0 is a termination, a positive discount a truncation. Jumanji's own time limits (Snake,
Maze, ...) end episodes with discount 0, as if the agent had failed; here the adapter takes
the time limit over (Jumanji is told `NO_LIMIT`) and ends those episodes as truncations, so
they bootstrap. The adapter returns the LAST observation as `final_obs` and resets
automatically. The observation's fields (grids, positions, action masks, step counts) are
flattened into one float vector. `env_kwargs` go to `jumanji.make`, except `time_limit` (or
`episode_length`), the adapter's limit: default the environment's own, else
`DEFAULT_EPISODE_LENGTH` (Game2048 has none). GIFs come from Jumanji's `animate`.

The observation's `action_mask`, where it has one, is the environment's action mask
(`Env.action_mask`): the policy acts over the legal actions only (`mask_actions: false`
treats every action as legal; the mask stays in the observation either way). A single
discrete action is supported, and a multi-discrete one whose mask is over the joint
action (Minesweeper's row x column, BinPack's space x item, Tetris's rotation x column,
Sudoku's row x column x digit): it becomes one discrete action over the product, in row-
major order, its mask flattened the same way. Other multi-discrete spaces (per-agent or
per-machine actions: JobShop, Cleaner) are refused.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.envs.base import Env, EnvSpec, StepResult, snapshot_names
from rlax_trpo.errors import ConfigError

DEFAULT_EPISODE_LENGTH = 1000
NO_LIMIT = 2**30  # what Jumanji is told its time limit is, when the adapter enforces it
LAST = 2  # dm_env.StepType.LAST


class JumanjiState(NamedTuple):
    inner: Any
    steps: jax.Array
    mask: Any = None  # the legal actions of the observation's state, flat (with a mask)


# `jumanji.registered_environments()` of jumanji 1.1.2 (tests/test_envs.py compares it).
SNAPSHOT = (
    "1.1.2",
    (
        "BinPack-v2",
        "CVRP-v1",
        "Cleaner-v0",
        "Connector-v3",
        "FlatPack-v0",
        "Game2048-v1",
        "GraphColoring-v1",
        "JobShop-v0",
        "Knapsack-v1",
        "LevelBasedForaging-v0",
        "MMST-v0",
        "Maze-v0",
        "Minesweeper-v0",
        "MultiCVRP-v0",
        "PacMan-v1",
        "RobotWarehouse-v0",
        "RubiksCube-partly-scrambled-v0",
        "RubiksCube-v0",
        "SearchAndRescue-v0",
        "SlidingTilePuzzle-v0",
        "Snake-v1",
        "Sokoban-v0",
        "Sudoku-v0",
        "Sudoku-very-easy-v0",
        "TSP-v1",
        "Tetris-v0",
    ),
)


def live_names() -> list[str]:
    try:
        import jumanji
    except ImportError:  # the `jumanji` extra is not installed
        return []
    return sorted(jumanji.registered_environments())


def names() -> list[str]:
    return snapshot_names("jumanji", "jumanji", *SNAPSHOT, live_names)


def _flatten(observation: Any) -> jax.Array:
    leaves = jax.tree.leaves(observation)
    return jnp.concatenate([jnp.asarray(x, jnp.float32).reshape(-1) for x in leaves])


def make(name: str, env_kwargs: dict[str, Any], flatten: bool) -> Env:
    import jumanji

    kwargs = dict(env_kwargs)
    limit = kwargs.pop("episode_length", None) or kwargs.pop("time_limit", None)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"env_kwargs.time_limit: must be a positive integer (got {limit!r})")
    try:
        env = jumanji.make(name, **kwargs)
        own_limit = int(getattr(env, "time_limit", 0) or 0)
        if own_limit:  # the adapter enforces the time limit, as a truncation
            env = jumanji.make(name, **kwargs, time_limit=NO_LIMIT)
    except TypeError as err:
        raise ConfigError(f"env_kwargs: jumanji/{name} does not take them ({err})") from None
    limit = int(limit or own_limit or DEFAULT_EPISODE_LENGTH)
    _, first = jax.eval_shape(env.reset, jax.random.key(0))
    components, has_mask = _action_components(name, env.action_spec, first.observation)
    obs_size = _flatten(jax.tree.map(jnp.zeros_like, first.observation)).shape[0]
    num_actions = math.prod(components)
    fields = tuple(
        (jax.tree_util.keystr(path).lstrip("."), tuple(leaf.shape))
        for path, leaf in jax.tree_util.tree_flatten_with_path(first.observation)[0]
    )
    env_spec = EnvSpec((obs_size,), True, num_actions, max_episode_steps=limit, obs_fields=fields)

    def to_env_action(action):
        action = jnp.asarray(action, jnp.int32)
        if len(components) == 1:
            return action
        return jnp.stack(jnp.unravel_index(action, components)).astype(jnp.int32)

    def mask_of(observation):
        return observation.action_mask.reshape(num_actions).astype(bool) if has_mask else None

    def reset(key):
        state, timestep = env.reset(key)
        mask = mask_of(timestep.observation)
        return _flatten(timestep.observation), JumanjiState(state, jnp.zeros((), jnp.int32), mask)

    def step(key, state, action):
        inner, timestep = env.step(state.inner, to_env_action(action))
        steps = state.steps + 1
        last = timestep.step_type == LAST
        terminated = last & (timestep.discount == 0)
        truncated = (last & (timestep.discount > 0)) | ((steps >= limit) & ~terminated)
        final_obs = _flatten(timestep.observation)
        done = terminated | truncated
        obs0, fresh = reset(key)
        after = JumanjiState(inner, steps, mask_of(timestep.observation))
        nxt = jax.tree.map(lambda r, n: jnp.where(done, r, n), fresh, after)
        obs = jnp.where(done, obs0, final_obs)
        reward = jnp.asarray(timestep.reward, jnp.float32)
        return StepResult(obs, nxt, reward, terminated, truncated, final_obs)

    def render(states: list, returns: Any, path: str) -> None:
        import matplotlib.pyplot as plt

        previous = plt.get_backend()
        plt.switch_backend("Agg")  # Jumanji draws with pyplot; the caller's backend comes back
        try:
            env.animate([s.inner for s in states], interval=100, save_path=str(path))
        finally:
            plt.switch_backend(previous)
            plt.close("all")

    action_mask = (lambda state: state.mask) if has_mask else None
    return Env(reset, step, env_spec, f"jumanji/{name}", render, action_mask=action_mask)


def _action_components(name: str, spec: Any, observation: Any) -> tuple[tuple[int, ...], bool]:
    """(the sizes of the action's components: one for a single discrete action, several
    for a multi-discrete one flattened to their product; whether the observation has an
    `action_mask` over that action), or a one-line ConfigError for an unsupported space."""
    mask = getattr(observation, "action_mask", None)
    if hasattr(spec, "num_values") and getattr(spec, "shape", ()) == ():
        return (int(spec.num_values),), mask is not None and mask.shape == (spec.num_values,)
    values = tuple(int(v) for v in getattr(spec, "num_values", ()))
    if len(values) > 1 and mask is not None and tuple(mask.shape) == values:
        return values, True
    raise ConfigError(
        f"env: jumanji/{name} has no single discrete action, nor a multi-discrete one with "
        "a mask over the joint action (not supported)"
    )
