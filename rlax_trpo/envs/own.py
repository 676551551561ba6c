"""Environments of this library's own, written as gymnax environments.

The registry (`rlax_trpo.envs.registry`) names their factories and imports this module the
first time one of them is made.

* `MaxDigit-qa`: a contextual question-answer bandit, the setting GRPO was designed for. The
  "question" is `num_digits` random digits in `[0, num_values)` shown one-hot; the "answer" is
  one action in `[0, num_values)`; the reward is 1 if it equals the largest digit, else 0. Every
  episode is one step and ends by termination (never truncation).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rlax_trpo.envs.gymnax_suite import import_gymnax

_gymnax = import_gymnax()  # its renderers' plotting libraries deferred
environment, spaces = _gymnax.environments.environment, _gymnax.environments.spaces


@struct.dataclass
class MaxDigitState(environment.EnvState):
    digits: jax.Array  # `[num_digits]` int32, the question
    time: int


@struct.dataclass
class MaxDigitParams(environment.EnvParams):
    max_steps_in_episode: int = 1


class MaxDigit(environment.Environment[MaxDigitState, MaxDigitParams]):
    """Observe `num_digits` one-hot digits, answer with their maximum (reward 1 if right).

    gymnax 1.0 contract: `step_env` returns `(obs, state, reward, terminated, info)`; the
    answer terminates the episode, and `step` auto-resets with a new question. The digit
    count and range fix the observation shape, so they are constructor arguments (static),
    not `EnvParams` fields.
    """

    def __init__(self, num_digits: int = 4, num_values: int = 10):
        super().__init__()
        self.num_digits = num_digits
        self.num_values = num_values

    @property
    def default_params(self) -> MaxDigitParams:
        return MaxDigitParams()

    def step_env(
        self, key: jax.Array, state: MaxDigitState, action: Any, params: MaxDigitParams
    ) -> tuple[jax.Array, MaxDigitState, jax.Array, jax.Array, dict[str, Any]]:
        correct = jnp.asarray(action, jnp.int32) == jnp.max(state.digits)
        reward = correct.astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        terminated = jnp.array(True)
        obs = self.get_obs(state, params)
        return obs, state, reward, terminated, {"discount": jnp.float32(0.0)}

    def reset_env(self, key: jax.Array, params: MaxDigitParams) -> tuple[jax.Array, MaxDigitState]:
        digits = jax.random.randint(key, (self.num_digits,), 0, self.num_values, jnp.int32)
        state = MaxDigitState(digits=digits, time=0)
        return self.get_obs(state, params), state

    def get_obs(self, state: MaxDigitState, params=None, key=None) -> jax.Array:
        """One-hot digits, `[num_digits, num_values]` float32."""
        return jax.nn.one_hot(state.digits, self.num_values, dtype=jnp.float32)

    def is_terminated(self, state: MaxDigitState, params: MaxDigitParams) -> jax.Array:
        return jnp.array(True)

    def is_truncated(self, state: MaxDigitState, params: MaxDigitParams) -> jax.Array:
        # Every episode ends by its single answer (termination); the time limit never binds.
        return jnp.array(False)

    @property
    def name(self) -> str:
        return "MaxDigit-qa"

    @property
    def num_actions(self) -> int:
        return self.num_values

    def action_space(self, params: MaxDigitParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(self.num_values)

    def observation_space(self, params: MaxDigitParams) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.num_digits, self.num_values), jnp.float32)

    def state_space(self, params: MaxDigitParams) -> spaces.Dict:
        return spaces.Dict(
            {
                "digits": spaces.Box(0, self.num_values - 1, (self.num_digits,), jnp.int32),
                "time": spaces.Discrete(2),
            }
        )


def max_digit(num_digits: int = 4, num_values: int = 10) -> tuple[MaxDigit, MaxDigitParams]:
    """The `MaxDigit-qa` factory: a gymnax `(environment, env_params)` pair."""
    env = MaxDigit(num_digits, num_values)
    return env, env.default_params
