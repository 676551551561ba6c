"""Probe environments with known answers (after Andy Jones' probes, as used in rejax's tests).

Each is a minimal gymnax 1.0 environment; `register_probes()` registers them by name.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from rlax_trpo.envs import register_env


@struct.dataclass
class ProbeState(environment.EnvState):
    obs: jax.Array
    time: int


@struct.dataclass
class ProbeParams(environment.EnvParams):
    max_steps_in_episode: int = 8


class Probe(environment.Environment):
    """kind:
    * "constant":  one step, obs 0, reward 1                       -> V = 1
    * "obs_reward": one step, obs +-1 at random, reward = obs      -> V(obs) = obs
    * "two_step":  obs 0 then 1, reward only on the second step    -> V(0) = gamma, V(1) = 1
    * "action":    one step, two actions, reward 1 for action 1    -> pi(1) -> 1
    * "timelimit": reward 1 every step, never terminates, truncated at 8 steps (SB3's
                   time-limit test); the observation is constant, so the one state's value
                   is the infinite-horizon V = 1/(1-gamma).
    * "timelimit_as_terminal": the same, but the time limit is reported as termination
                   (the mistake): V is then the average of sum_{k < 8 - t} gamma^k, below 8.
    * "nan_at_40": reward 1 every step, except NaN at the 40th step of an episode (episodes
                   last 100 steps): a run diverges in the iteration that collects step 40.
    """

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def _obs(self, state):
        return state.obs

    def reset_env(self, key, params):
        if self.kind == "obs_reward":
            obs = jnp.where(jax.random.bernoulli(key), 1.0, -1.0)[None]
        else:
            obs = jnp.zeros((1,))
        state = ProbeState(obs=obs, time=0)
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        time = state.time + 1
        if self.kind == "constant":
            reward, term = 1.0, True
        elif self.kind == "obs_reward":
            reward, term = state.obs[0], True
        elif self.kind == "two_step":
            reward = jnp.where(state.obs[0] > 0.5, 1.0, 0.0)
            term = state.obs[0] > 0.5
        elif self.kind == "action":
            reward, term = jnp.where(action == 1, 1.0, 0.0), True
        elif self.kind == "timelimit":
            reward, term = 1.0, False
        elif self.kind == "timelimit_as_terminal":
            reward, term = 1.0, time >= params.max_steps_in_episode
        elif self.kind == "nan_at_40":
            reward, term = jnp.where(time == 40, jnp.nan, 1.0), False
        else:
            raise ValueError(self.kind)
        new = ProbeState(obs=jnp.ones((1,)) if self.kind == "two_step" else state.obs, time=time)
        return (self._obs(new), new, jnp.asarray(reward, jnp.float32), jnp.asarray(term), {})

    def is_truncated(self, state, params):
        if self.kind == "timelimit_as_terminal":
            return jnp.asarray(False)
        return state.time >= params.max_steps_in_episode

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


KINDS = ("constant", "obs_reward", "two_step", "action", "timelimit", "timelimit_as_terminal")


def register_probes() -> None:
    for kind in KINDS:
        register_env(f"Probe-{kind}", lambda kind=kind: (Probe(kind), ProbeParams()))
    long = ProbeParams(max_steps_in_episode=100)
    register_env("Probe-nan_at_40", lambda: (Probe("nan_at_40"), long))
