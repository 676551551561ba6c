"""PureJaxRL's own PPO as a reference in the same invocation (`throughput.py --purejaxrl`).

PureJaxRL's code is not part of this repository. `load(path)` takes its `purejaxrl/ppo.py`
(with `wrappers.py` beside it) from a copy on disk, copies both into a scratch folder and
imports them there with two changes that leave its training code as written:

- `wrappers.py` imports Brax and Navix at the top for wrappers that `ppo.py` does not use;
  those import lines are dropped, so neither suite has to be installed.
- gymnax 1.0's `env.step` returns `(obs, state, reward, terminated, truncated, info)`, and
  PureJaxRL unpacks five values. `ppo.py` gets a `gymnax.make` whose environments return
  `(obs, state, reward, terminated or truncated, info)` with `info` as gymnax 0.x filled it
  (gymnax 1.0's extra `terminated`, `truncated` and `final_observation` entries left out, so
  the trajectory PureJaxRL stores is the size it was written for).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

DROPPED_IMPORTS = ("from brax", "import navix")
NEW_INFO_KEYS = ("terminated", "truncated", "final_observation")


class _FiveValueStep:
    """A gymnax 1.0 environment whose `step` returns gymnax 0.x's five values."""

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {k: v for k, v in info.items() if k not in NEW_INFO_KEYS}
        return obs, state, reward, jnp.logical_or(terminated, truncated), info


def load(path: str | Path) -> Any:
    """PureJaxRL's `ppo` module from `path` (its `ppo.py`; `wrappers.py` in the same folder),
    imported from a scratch copy with the changes in this module's docstring."""
    path = Path(path)
    wrappers = path.with_name("wrappers.py")
    for needed in (path, wrappers):
        if not needed.is_file():
            raise FileNotFoundError(f"--purejaxrl: {str(needed)!r} does not exist")
    scratch = Path(tempfile.mkdtemp(prefix="purejaxrl-"))
    shutil.copy(path, scratch / "ppo.py")
    kept = [
        line
        for line in wrappers.read_text().splitlines(keepends=True)
        if not line.lstrip().startswith(DROPPED_IMPORTS)
    ]
    (scratch / "wrappers.py").write_text("".join(kept))
    sys.path.insert(0, str(scratch))  # `ppo.py` imports `wrappers` by its bare name
    spec = importlib.util.spec_from_file_location("purejaxrl_ppo", scratch / "ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gymnax = module.gymnax

    def make(name: str, **kwargs: Any):
        env, params = gymnax.make(name, **kwargs)
        return _FiveValueStep(env), params

    module.gymnax = SimpleNamespace(make=make)
    return module


def settings(config: Any) -> dict[str, Any]:
    """PureJaxRL's configuration dict for one of our PPO configs (same sizes and settings)."""
    c = config.to_dict()
    hp = c["hp"]
    return {
        "LR": hp["learning_rate"],
        "NUM_ENVS": c["num_envs"],
        "NUM_STEPS": c["num_steps"],
        "TOTAL_TIMESTEPS": c["total_env_steps"],
        "UPDATE_EPOCHS": c["num_epochs"],
        "NUM_MINIBATCHES": c["num_minibatches"],
        "GAMMA": hp["gamma"],
        "GAE_LAMBDA": hp["gae_lambda"],
        "CLIP_EPS": hp["clip_eps"],
        "ENT_COEF": hp["ent_coef"],
        "VF_COEF": hp["vf_coef"],
        "MAX_GRAD_NORM": hp["max_grad_norm"],
        "ACTIVATION": c["activation"],
        "ENV_NAME": c["env"],
        "ANNEAL_LR": c["anneal_lr"],
        "DEBUG": False,
    }


def final_return(metrics: dict[str, Any], last_fraction: float = 0.1) -> float:
    """Mean return of the episodes that ended in the last `last_fraction` of updates (all
    seeds), from PureJaxRL's per-step `returned_episode_returns` and `returned_episode`."""
    returns = np.asarray(metrics["returned_episode_returns"])  # [(seeds,) updates, steps, envs]
    ended = np.asarray(metrics["returned_episode"]).astype(bool)
    updates = returns.shape[-3]
    tail = max(1, int(np.ceil(updates * last_fraction)))
    returns, ended = returns[..., -tail:, :, :], ended[..., -tail:, :, :]
    return float(returns[ended].mean()) if ended.any() else float("nan")


def make_run(module: Any, config: Any, seeds: int):
    """`(fn, keys, env_steps)`: PureJaxRL's jitted `train` over `seeds` seeds (vmapped when
    more than one, as its README does), its keys, and the env steps one call takes."""
    cfg = settings(config)
    train = module.make_train(cfg)  # fills in NUM_UPDATES
    if seeds == 1:
        fn, keys = jax.jit(train), jax.random.PRNGKey(0)
    else:
        fn, keys = jax.jit(jax.vmap(train)), jax.random.split(jax.random.PRNGKey(0), seeds)
    env_steps = cfg["NUM_UPDATES"] * cfg["NUM_STEPS"] * cfg["NUM_ENVS"] * seeds
    return fn, keys, env_steps
