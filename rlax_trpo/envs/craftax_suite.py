"""Craftax (`craftax/<Name>`): the open-ended JAX benchmark of Matthews et al. (2024).

Names: `Craftax-Symbolic-v1` (8268 features), `Craftax-Pixels-v1`, and the 2D-Crafter remake
`Craftax-Classic-Symbolic-v1` (1345) and `Craftax-Classic-Pixels-v1` (63x63x3 images).
The adapter steps Craftax's environments without their automatic reset (`Env.transition`)
and resets itself, so `reset_ratio` can draw fresh worlds from a pool: a world's generation
costs about 20 steps. An episode ends by death or by defeating the final boss (terminated)
or at the time limit `max_timesteps` (truncated: 10,000 steps in Classic, 100,000 in
Craftax). `env_kwargs` replace fields of Craftax's `EnvParams`.

Episode figures (`StepResult.info`, logged as `episode/<name>_sum` and summarised per seed):
`score_percent`, the episode's return as a percentage of the maximum (226 in Craftax, 22 in
Classic: every achievement's reward), the unit of the Craftax scoreboard;
`achievement_reward_percent`, the reward of the achievements unlocked alone, in the same
unit (the return also counts 0.1 per point of health gained or lost, so an episode that
ends in death from full health scores 0.9 below its achievements: 0.40 points in Craftax);
`achievements`, how many were unlocked; and `achievement/<name>`, 1 where that one was (the
mean over episodes is its success rate). GIFs come from Craftax's own pixel renderer.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.envs.base import Env, EnvSpec, StepResult, auto_reset, snapshot_names
from rlax_trpo.envs.gymnax_suite import check_param
from rlax_trpo.errors import ConfigError

NAMES = (
    "Craftax-Classic-Pixels-v1",
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Pixels-v1",
    "Craftax-Symbolic-v1",
)
SNAPSHOT = ("1.6.1", NAMES)
GIF_BLOCK_PIXELS = 16  # the renderer's image resolution per map block


class CraftaxState(NamedTuple):
    inner: Any  # Craftax's EnvState
    episode_return: jax.Array  # for the score in % of the maximum


def live_names() -> list[str]:
    try:
        import craftax.craftax_env  # noqa: F401
    except ImportError:  # the `craftax` extra is not installed
        return []
    return list(NAMES)


def names() -> list[str]:
    return snapshot_names("craftax", "craftax", *SNAPSHOT, live_names)


def achievement_names(classic: bool) -> list[str]:
    """The achievements' names, lower case, in Craftax's order (`achievement/<name>`)."""
    if classic:
        from craftax.craftax_classic.constants import Achievement
    else:
        from craftax.craftax.constants import Achievement
    return [a.name.lower() for a in sorted(Achievement, key=lambda a: a.value)]


def achievement_rewards(classic: bool) -> jax.Array:
    """Each achievement's reward, in the order of `achievement_names`: 1 in Classic; in
    Craftax 1, 3, 5 or 8 by tier (basic, intermediate, advanced, very advanced)."""
    if classic:
        from craftax.craftax_classic.constants import Achievement

        return jnp.ones(len(Achievement), jnp.float32)
    from craftax.craftax.constants import ACHIEVEMENT_REWARD_MAP

    return jnp.asarray(ACHIEVEMENT_REWARD_MAP, jnp.float32)


def max_return(classic: bool) -> float:
    """The largest return an episode can reach: the sum of every achievement's reward."""
    return float(jnp.sum(achievement_rewards(classic)))


def achievement_reward_percent(unlocked: Any, classic: bool) -> jax.Array:
    """The reward of the achievements `unlocked` (1 or 0 each, or success rates, in the order
    of `achievement_names`) as a percentage of the maximum, health's reward left out."""
    weights = achievement_rewards(classic)
    return 100.0 * jnp.dot(jnp.asarray(unlocked, jnp.float32), weights) / jnp.sum(weights)


def make(name: str, env_kwargs: dict[str, Any], flatten: bool) -> Env:
    from craftax.craftax_env import make_craftax_env_from_name

    inner_env = make_craftax_env_from_name(name, auto_reset=False)
    params = inner_env.default_params
    if env_kwargs:
        unknown = sorted(set(env_kwargs) - set(params.__dataclass_fields__))
        if unknown:
            raise ConfigError(
                f"env_kwargs.{unknown[0]}: not a parameter of craftax/{name}; allowed: "
                f"{', '.join(sorted(params.__dataclass_fields__))}"
            )
        for key, value in env_kwargs.items():
            check_param(f"craftax/{name}", key, value, getattr(params, key))
        params = params.replace(**env_kwargs)
    classic = "Classic" in name
    best = max_return(classic)
    achievements = achievement_names(classic)
    obs_shape = tuple(int(d) for d in inner_env.observation_space(params).shape)
    if flatten and len(obs_shape) > 1:
        obs_shape = (int(jnp.prod(jnp.array(obs_shape))),)
    spec = EnvSpec(
        obs_shape,
        True,
        int(inner_env.action_space(params).n),
        max_episode_steps=int(params.max_timesteps),
    )

    def prep(obs):
        return jnp.asarray(obs, jnp.float32).reshape(obs_shape)

    def reset(key):
        obs, state = inner_env.reset_env(key, params)
        return prep(obs), CraftaxState(state, jnp.zeros((), jnp.float32))

    def transition(key, state, action):
        obs, inner, reward, done, _ = inner_env.step_env(
            key, state.inner, jnp.asarray(action, jnp.int32), params
        )
        reward = jnp.asarray(reward, jnp.float32)
        truncated = (inner.timestep >= params.max_timesteps) & (inner.player_health > 0)
        terminated = jnp.asarray(done, bool) & ~truncated
        episode_return = state.episode_return + reward
        unlocked = jnp.asarray(inner.achievements, jnp.float32)
        info = {
            "score_percent": 100.0 * episode_return / best,
            "achievement_reward_percent": achievement_reward_percent(unlocked, classic),
            "achievements": unlocked.sum(),
        }
        info.update({f"achievement/{a}": unlocked[i] for i, a in enumerate(achievements)})
        obs = prep(obs)
        new = CraftaxState(inner, episode_return)
        return StepResult(obs, new, reward, terminated, truncated, obs, info)

    step = auto_reset(transition, reset)

    def render(states: list, returns: Any, path: str) -> None:
        _render_gif(classic, [s.inner for s in states], returns, path)

    return Env(reset, step, spec, f"craftax/{name}", render, transition)


def _render_gif(classic: bool, states: list, returns: Any, path: str) -> None:
    """A GIF of recorded Craftax states through Craftax's own pixel renderer."""
    import numpy as np
    from PIL import Image, ImageDraw

    if classic:
        from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
    else:
        from craftax.craftax.renderer import make_craftax_pixel_renderer
    draw = jax.jit(make_craftax_pixel_renderer(GIF_BLOCK_PIXELS))
    frames = []
    for t, state in enumerate(states):
        pixels = np.asarray(draw(state))
        frame = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        ImageDraw.Draw(frame).text((4, 4), f"t={t + 1} return={returns[t]:.1f}", fill=(255,) * 3)
        frames.append(frame)
    palette = frames[0].quantize(colors=128)
    frames = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
