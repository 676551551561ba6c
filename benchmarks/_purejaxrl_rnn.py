"""PureJaxRL's own recurrent PPO (`purejaxrl/ppo_rnn.py`) as a reference in the same
invocation (`memory_vs_purejaxrl.py`).

PureJaxRL's code is not part of this repository. `load(path)` imports its `ppo_rnn.py` from a
scratch copy (as `_purejaxrl.load` does for `ppo.py`, with the same two changes to
`wrappers.py` and to gymnax 1.0's five-value step) and gives it two shims for today's flax,
leaving its training code as written:

- `nn.GRUCell()` is called without `features`, which flax now requires: the module sees a
  `GRUCell` whose `features` defaults to 128, the width `ppo_rnn.py` uses everywhere else.
- `nn.GRUCell.initialize_carry(key, (batch,), size)` is the old static signature: the module
  sees one that returns the zeros it returned.

`gymnax.make(name)` of the loaded module also serves `pomdp/<name>`: the gymnax task with the
observation entries of `rlax_trpo.envs.pomdp.KEPT` only, so both implementations train on the
same partially observed task.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _purejaxrl  # noqa: E402

from rlax_trpo.envs.pomdp import KEPT  # noqa: E402


class _GRUCell(nn.GRUCell):
    features: int = 128

    @staticmethod
    def initialize_carry(key: Any, batch_dims: tuple[int, ...], size: int) -> Any:
        return jnp.zeros((*batch_dims, size), jnp.float32)


class _Hidden:
    """A five-value gymnax environment observing only the entries `kept`."""

    def __init__(self, env: Any, kept: tuple[int, ...]):
        self._env, self._kept = env, np.asarray(kept)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return obs[self._kept], state

    def step(self, key, state, action, params=None):
        obs, state, reward, done, info = self._env.step(key, state, action, params)
        return obs[self._kept], state, reward, done, info

    def observation_space(self, params):
        box = self._env.observation_space(params)
        low = jnp.broadcast_to(box.low, box.shape)[self._kept]  # traced inside jit
        high = jnp.broadcast_to(box.high, box.shape)[self._kept]
        return spaces.Box(low, high, (len(self._kept),), box.dtype)


def load(path: str | Path) -> Any:
    """PureJaxRL's `ppo_rnn` module from `path` (its `ppo_rnn.py`, `wrappers.py` beside it)."""
    module = _purejaxrl.load(path)
    module.nn = SimpleNamespace(**{k: getattr(nn, k) for k in dir(nn) if not k.startswith("_")})
    module.nn.GRUCell = _GRUCell
    make = module.gymnax.make

    def make_hidden(name: str, **kwargs: Any):
        if name.startswith("pomdp/"):
            base = name.removeprefix("pomdp/")
            env, params = make(base, **kwargs)
            return _Hidden(env, KEPT[base]), params
        return make(name, **kwargs)

    module.gymnax = SimpleNamespace(make=make_hidden)
    return module


def make_run(module: Any, config: Any):
    """`(fn, key, env_steps)`: PureJaxRL's jitted `train` for one seed (vmapped seeds hang:
    its flax orthogonal initialisers are LAPACK QRs) and the env steps one call takes."""
    import jax

    cfg = _purejaxrl.settings(config)
    train = module.make_train(cfg)
    env_steps = cfg["NUM_UPDATES"] * cfg["NUM_STEPS"] * cfg["NUM_ENVS"]
    return jax.jit(train), jax.random.PRNGKey(0), env_steps


def final_return(out: dict, last_fraction: float = 0.1) -> float:
    return _purejaxrl.final_return(out["metric"], last_fraction)
