"""A user environment with invalid actions, for the action-mask tests.

`LegalPick`: each step a fresh random set of `num_actions` actions is legal (at least one;
with `one_legal`, exactly one), shown as the observation. Reward 1 for a legal action, 0 for
an illegal one; episodes last `max_steps_in_episode` steps (a truncation). So a policy that
respects the mask earns exactly 1 every step, whatever it has learnt, and one that does not
earns less. It gives its mask the way a user's gymnax environment does: a method
`action_mask(state, params)`. `register_masked_envs()` registers it and two faulty variants
(a mask of the wrong size; a mask on continuous actions) under `LegalPick-*` names.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from rlax_trpo.envs import register_env


@struct.dataclass
class PickState(environment.EnvState):
    legal: jax.Array  # [num_actions] bool
    time: int


@struct.dataclass
class PickParams(environment.EnvParams):
    max_steps_in_episode: int = 8


class LegalPick(environment.Environment):
    def __init__(self, num_actions: int = 6, one_legal: bool = False, mask_size: int = 0):
        super().__init__()
        self.n, self.one_legal, self.mask_size = num_actions, one_legal, mask_size or num_actions

    @property
    def default_params(self) -> PickParams:
        return PickParams()

    def _draw(self, key: jax.Array) -> jax.Array:
        if self.one_legal:
            return jax.nn.one_hot(jax.random.randint(key, (), 0, self.n), self.n) > 0
        k_set, k_one = jax.random.split(key)
        legal = jax.random.bernoulli(k_set, 0.4, (self.n,))
        return legal.at[jax.random.randint(k_one, (), 0, self.n)].set(True)

    def reset_env(self, key, params):
        state = PickState(legal=self._draw(key), time=0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        action = jnp.asarray(action).reshape(-1)[0].astype(jnp.int32) % self.n
        reward = state.legal[action].astype(jnp.float32)
        state = PickState(legal=self._draw(key), time=state.time + 1)
        done = self.is_terminal(state, params)
        return self.get_obs(state), state, reward, jnp.array(False), {"discount": 1.0 - done}

    def is_terminal(self, state, params):
        return state.time >= params.max_steps_in_episode

    def is_terminated(self, state, params):
        return jnp.array(False)

    def is_truncated(self, state, params):
        return state.time >= params.max_steps_in_episode

    def get_obs(self, state, params=None, key=None):
        return state.legal.astype(jnp.float32)

    def action_mask(self, state, params):
        return jnp.resize(state.legal, (self.mask_size,))

    @property
    def name(self) -> str:
        return "LegalPick"

    @property
    def num_actions(self) -> int:
        return self.n

    def action_space(self, params=None):
        return spaces.Discrete(self.n)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (self.n,), jnp.float32)


class ContinuousPick(LegalPick):
    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


def register_masked_envs() -> None:
    register_env("LegalPick", lambda: (LegalPick(), PickParams()))
    register_env("LegalPick-one", lambda: (LegalPick(one_legal=True), PickParams()))
    register_env("LegalPick-wrong_size", lambda: (LegalPick(mask_size=5), PickParams()))
    register_env("LegalPick-continuous", lambda: (ContinuousPick(), PickParams()))
