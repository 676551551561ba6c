"""gymnax 1.0 environments adapted to the `Env` contract (the default suite).

gymnax's `step` returns `(obs, state, reward, terminated, truncated, info)` with
`info["final_observation"]` the observation before the automatic reset; both flags and that
observation are kept. Box actions are clipped to their bounds here (the policy's unclipped
Gaussian sample is what the trajectory stores).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import sys
import types
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.envs.base import Env, EnvSpec, StepResult, snapshot_names
from rlax_trpo.errors import ConfigError

# `gymnax.registered_envs` of gymnax 1.0.1 (tests/test_envs.py compares it with the library).
SNAPSHOT = (
    "1.0.1",
    (
        "CartPole-v1",
        "Pendulum-v1",
        "Acrobot-v1",
        "MountainCar-v0",
        "MountainCarContinuous-v0",
        "Asterix-MinAtar",
        "Breakout-MinAtar",
        "Freeway-MinAtar",
        "Seaquest-MinAtar",
        "SpaceInvaders-MinAtar",
        "Catch-bsuite",
        "DeepSea-bsuite",
        "MemoryChain-bsuite",
        "UmbrellaChain-bsuite",
        "DiscountingChain-bsuite",
        "MNISTBandit-bsuite",
        "SimpleBandit-bsuite",
        "FourRooms-misc",
        "MetaMaze-misc",
        "PointRobot-misc",
        "BernoulliBandit-misc",
        "GaussianBandit-misc",
        "Reacher-misc",
        "Swimmer-misc",
        "Pong-misc",
        "FrozenLake-misc",
    ),
)


# What gymnax's renderers import at the top of their modules (Pong: seaborn and pyplot; Catch:
# pyplot) and use only when drawing: seaborn alone brings scipy.stats and pandas. Deferred,
# `import gymnax` takes 1.0 s instead of 3.2 s on a 2-core AMD EPYC (python -X importtime),
# in every process that makes a gymnax environment (python train.py included).
RENDER_ONLY_IMPORTS = ("seaborn", "matplotlib.pyplot")


class _Deferred(types.ModuleType):
    """Stands in for a module in the modules that imported it while it was deferred: the
    first attribute read imports the real module and takes over its namespace."""

    def __getattr__(self, attr: str) -> Any:
        real = importlib.import_module(self.__name__)
        self.__dict__.update(real.__dict__)
        return getattr(real, attr)


@contextlib.contextmanager
def _deferred(names: tuple[str, ...]) -> Iterator[None]:
    """Within: `import NAME` of a module not yet imported gives a `_Deferred` stand-in. After:
    sys.modules no longer holds the stand-ins, so a later import anywhere is the real one."""
    placed = {}
    for name in names:
        if name in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:  # not installed: the import fails as it would have
            placed[name] = sys.modules[name] = _Deferred(name)
            placed[name].__spec__ = spec
    try:
        yield
    finally:
        for name, stand_in in placed.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


def import_gymnax() -> types.ModuleType:
    """`import gymnax`, with `RENDER_ONLY_IMPORTS` deferred to the first drawing."""
    if "gymnax" not in sys.modules:
        with _deferred(RENDER_ONLY_IMPORTS):
            importlib.import_module("gymnax")
    return sys.modules["gymnax"]


def live_names() -> list[str]:
    return list(import_gymnax().registered_envs)


def names() -> list[str]:
    return snapshot_names("gymnax", "gymnax", *SNAPSHOT, live_names)


def check_param(env: str, key: str, value: Any, default: Any) -> None:
    """`env_kwargs.key` has the type of the parameter it replaces (a bool, an integer or a
    finite number), and a step limit is positive: a one-line ConfigError, not a failure of
    the compiled program."""
    kind = np.asarray(default).dtype.kind
    where = f"env_kwargs.{key}"
    if kind == "b":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {env} expects true or false (got {value!r})")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {env} expects a number (got {value!r})")
    if kind in "iu" and not float(value).is_integer():
        raise ConfigError(f"{where}: {env} expects an integer (got {value!r})")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: must be finite (got {value!r})")
    dtype = jax.dtypes.canonicalize_dtype(np.asarray(default).dtype)  # as JAX will hold it
    info, number = (np.iinfo(dtype), int) if kind in "iu" else (np.finfo(dtype), float)
    low, high = number(info.min), number(info.max)
    if not low <= value <= high:
        raise ConfigError(f"{where}: {value!r} does not fit {env}'s {dtype} ({low} to {high})")
    if key.startswith("max_steps") and value < 1:
        raise ConfigError(f"{where}: must be a positive number of steps (got {value!r})")


def make(name: str, env_kwargs: dict[str, Any], flatten: bool) -> Env:
    gym_env, params = import_gymnax().make(name)
    return from_gymnax(gym_env, params, name=name, env_kwargs=env_kwargs, flatten=flatten)


def from_gymnax(
    gym_env: Any,
    params: Any,
    name: str,
    env_kwargs: dict[str, Any] | None = None,
    flatten: bool = True,
) -> Env:
    """Adapt a gymnax 1.0 environment and its `EnvParams` (fields replaced by `env_kwargs`).

    An environment with a method `action_mask(state, params) -> bool [num_actions]` gives
    the legal actions of each state (`Env.action_mask`)."""
    from gymnax.environments import spaces

    if env_kwargs:
        unknown = sorted(set(env_kwargs) - set(vars(params)))
        if unknown:
            raise ConfigError(
                f"env_kwargs.{unknown[0]}: not a parameter of {name}; allowed: "
                f"{', '.join(sorted(vars(params)))}"
            )
        for key, value in env_kwargs.items():
            check_param(name, key, value, getattr(params, key))
        params = params.replace(**env_kwargs)

    raw_shape = tuple(int(d) for d in gym_env.observation_space(params).shape)
    obs_shape = (math.prod(raw_shape),) if flatten else raw_shape
    act_space = gym_env.action_space(params)
    if isinstance(act_space, spaces.Discrete):
        spec = EnvSpec(obs_shape, True, int(act_space.n))
        to_env_action = lambda a: a
    elif isinstance(act_space, spaces.Box):
        act_shape = tuple(act_space.shape)
        dims = math.prod(act_shape or (1,))
        low = jnp.broadcast_to(jnp.asarray(act_space.low, jnp.float32), (dims,))
        high = jnp.broadcast_to(jnp.asarray(act_space.high, jnp.float32), (dims,))
        spec = EnvSpec(obs_shape, False, dims, low, high)
        to_env_action = lambda a: jnp.clip(a, low, high).reshape(act_shape)
    else:
        raise ConfigError(f"env: {name} has an unsupported action space {type(act_space).__name__}")
    spec = spec._replace(max_episode_steps=int(getattr(params, "max_steps_in_episode", 0)))

    def prep(obs):
        return jnp.asarray(obs, jnp.float32).reshape(obs_shape)

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

    def transition(key, state, action):  # gymnax's step without its automatic reset
        obs, state, reward, terminated, _ = gym_env.step_env(
            key, state, to_env_action(action), params
        )
        truncated = gym_env.is_truncated(state, params)
        return StepResult(
            prep(obs),
            state,
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, bool),
            jnp.asarray(truncated, bool),
            prep(obs),
        )

    def render(states: list, returns: Any, path: str) -> None:
        _render_gif(gym_env, params, states, returns, path)

    action_mask = None
    if callable(getattr(gym_env, "action_mask", None)):  # a user environment's legal actions
        action_mask = lambda state: gym_env.action_mask(state, params)
    return Env(reset, step, spec, name, render, transition, action_mask)


def _render_gif(gym_env: Any, params: Any, states: list, returns: Any, path: str) -> None:
    """A GIF of recorded states: classic control through one gymnasium renderer reused for
    every frame, the other gymnax environments through gymnax's `Visualizer`."""
    import os

    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")  # pygame: no audio or display probing
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    from gymnax.visualize import Visualizer, vis_gym

    if gym_env.name not in vis_gym.SUPPORTED_GYM_ENVS:
        import matplotlib.pyplot as plt

        previous = plt.get_backend()
        plt.switch_backend("Agg")  # gymnax draws with pyplot; the caller's backend comes back
        try:
            Visualizer(gym_env, params, states, returns).animate(str(path))
        finally:
            plt.switch_backend(previous)
        return
    import gymnasium
    from PIL import Image, ImageDraw

    renderer = gymnasium.make(gym_env.name, render_mode="rgb_array")
    try:
        renderer.reset(seed=0)
        inner = renderer.unwrapped
        vis_gym.set_gym_params(inner, gym_env.name, params)
        frames = []
        for t, state in enumerate(states):
            inner.state = vis_gym.get_gym_state(state, gym_env.name)
            if gym_env.name == "Pendulum-v1":
                inner.last_u = float(state.last_u)
            frame = Image.fromarray(renderer.render())
            ImageDraw.Draw(frame).text((8, 8), f"t={t + 1} return={returns[t]:.1f}", fill=0)
            frames.append(frame)
    finally:
        renderer.close()
    palette = frames[0].quantize(colors=64)
    frames = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
