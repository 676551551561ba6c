"""Extending the library from outside the package: an algorithm and an environment defined in
this file, registered through the public API and trained with `rlax_trpo.run`."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

import rlax_trpo
from rlax_trpo import Algorithm, Config, ConfigError
from rlax_trpo.advantages import monte_carlo_from_env
from rlax_trpo.algorithms.common import (
    flatten_batch,
    make_optimizer,
    optimizer_step,
    set_learning_rate,
)
from rlax_trpo.envs import valid_env_names
from rlax_trpo.losses import normalize, policy_gradient_loss
from rlax_trpo.types import Batch, Params

# --- a toy algorithm: REINFORCE with normalised Monte-Carlo returns, no critic ------------


class ToyState(NamedTuple):
    opt_state: Any


def make_toy_reinforce(config: Config, networks) -> Algorithm:
    optimizer = make_optimizer(config)

    def init(params: Params, hp) -> ToyState:
        return ToyState(optimizer.init(params.policy))

    def make_batch(params: Params, traj, hp) -> Batch:
        zeros = jnp.zeros_like(traj.reward)
        returns = monte_carlo_from_env(
            traj.reward, zeros, zeros, traj.terminated, traj.truncated, hp.gamma
        )
        return Batch(traj.obs, traj.action, traj.log_prob, returns, zeros, zeros)

    def update(params: Params, state: ToyState, batch: Batch, hp, key):
        flat = flatten_batch(batch)

        def loss(policy):
            log_prob = networks.policy(policy, flat.obs).log_prob(flat.action)
            return policy_gradient_loss(log_prob, normalize(flat.advantage))

        grads = jax.grad(loss)(params.policy)
        opt_state = set_learning_rate(state.opt_state, hp.learning_rate)
        policy, opt_state, norm = optimizer_step(
            optimizer, params.policy, opt_state, grads, hp.max_grad_norm
        )
        return Params(policy, None), ToyState(opt_state), {"toy/grad_norm": norm}

    return Algorithm(init, make_batch, update, critic=False)


def test_a_toy_algorithm_registers_and_trains_with_run(tmp_path):
    with pytest.raises(ConfigError, match="toy_reinforce"):
        Config.create(algorithm="toy_reinforce")  # unknown before it is registered
    rlax_trpo.register_algorithm("toy_reinforce", make_toy_reinforce)
    assert "toy_reinforce" in rlax_trpo.algorithm_names()
    config = Config.create(
        algorithm="toy_reinforce",
        env="CartPole-v1",
        num_envs=8,
        num_steps=128,
        total_env_steps=40_960,
        anneal_lr=False,
        hp={"learning_rate": 1e-2, "gamma": 0.99, "max_grad_norm": 1.0},
    )
    result = rlax_trpo.run(config, seeds=2, out=tmp_path / "run", progress=False)
    assert result.status == "complete"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["algorithm"] == "toy_reinforce" and summary["num_seeds"] == 2
    assert result.state.params.value is None  # critic=False: no value network
    ret = result.metrics["episode/return"]
    assert np.isfinite(result.metrics["toy/grad_norm"]).all()
    # A random CartPole policy lasts ~22 steps; REINFORCE at this budget roughly triples it.
    first, last = np.nanmean(ret[:, :3]), summary["final_return_mean"]
    assert first < 40 and last > 60, (first, last)


# --- a user environment: a one-step bandit whose arm 1 pays 1 ----------------------------


@struct.dataclass
class ArmState(environment.EnvState):
    time: int


@struct.dataclass
class ArmParams(environment.EnvParams):
    max_steps_in_episode: int = 1


class TwoArms(environment.Environment[ArmState, ArmParams]):
    @property
    def default_params(self) -> ArmParams:
        return ArmParams()

    def step_env(self, key, state, action, params):
        reward = (jnp.asarray(action) == 1).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, jnp.array(True), {}

    def reset_env(self, key, params):
        state = ArmState(time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.ones((2,), jnp.float32)

    def is_terminated(self, state, params):
        return jnp.array(True)

    def is_truncated(self, state, params):
        return jnp.array(False)

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)


def test_a_user_environment_registers_and_trains(tmp_path):
    rlax_trpo.register_env("TwoArms-test", lambda: (TwoArms(), ArmParams()))
    assert "TwoArms-test" in valid_env_names()
    config = Config.create(
        algorithm="ppo",
        env="TwoArms-test",
        num_envs=16,
        num_steps=8,
        total_env_steps=2048,
        num_minibatches=2,
        hp={"learning_rate": 1e-2, "ent_coef": 0.0},
    )
    result = rlax_trpo.run(config, seeds=1, out=tmp_path / "run", progress=False)
    assert result.summary["env"] == "TwoArms-test"
    assert result.summary["eval_return_mean"] == 1.0  # the greedy policy pulls arm 1
    assert result.summary["final_return_mean"] > 0.9
