"""Linen policy and value networks, separate, with orthogonal initialisation.

`make_networks(config, spec)` returns `Networks(init, policy, value)`:
  * `init(key) -> Params(policy, value)`
  * `policy(policy_params, obs) -> distrax.Distribution` over actions for obs `[..., *obs_shape]`
    (Categorical for discrete actions; diagonal Gaussian with a learned state-independent
    log-std for continuous ones, Huang et al. 2022 detail 3 of the continuous list)
  * `value(value_params, obs) -> [...]`
Initialisation follows the PPO implementation details: orthogonal with gain sqrt(2) for
hidden layers, 0.01 for the policy head and 1.0 for the value head, biases zero. The
orthogonal matrices are flax's, computed without LAPACK (`rlax_trpo.initializers`): a
vmapped LAPACK QR deadlocks jaxlib's CPU runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.envs import EnvSpec
from rlax_trpo.errors import ConfigError
from rlax_trpo.initializers import orthogonal
from rlax_trpo.types import Params

_ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


def _dense(features: int, gain: float) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(gain), bias_init=nn.initializers.zeros)


def patches_3x3(x: jax.Array) -> jax.Array:
    """`[..., H, W, C]` -> `[..., H, W, 9 C]`: each pixel's zero-padded 3x3 neighbourhood.

    A Dense layer on these patches is a 3x3 'SAME' convolution with stride 1. We build it
    from slices because `nn.Conv` inside the training scan ran 35x slower on jaxlib 0.10's
    CPU backend (97 s against 2.8 s per Breakout-MinAtar PPO iteration, 128 envs x 128
    steps); for 10x10 MinAtar images the matmul form is cheap on every backend.
    """
    h, w = x.shape[-3], x.shape[-2]
    pad = [(0, 0)] * (x.ndim - 3) + [(1, 1), (1, 1), (0, 0)]
    xp = jnp.pad(x, pad)
    shifts = [xp[..., i : i + h, j : j + w, :] for i in range(3) for j in range(3)]
    return jnp.concatenate(shifts, axis=-1)


class Torso(nn.Module):
    """MLP on flat observations, or a small CNN (MinAtar: 10x10xC images) then an MLP."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        act = _ACTIVATIONS[self.activation]
        x = obs
        if self.cnn:
            x = nn.relu(_dense(16, np.sqrt(2))(patches_3x3(x)))  # a 3x3 'SAME' convolution
            x = x.reshape(x.shape[:-3] + (-1,))
        for size in self.hidden_sizes:
            x = act(_dense(size, np.sqrt(2))(x))
        return x


class CategoricalPolicy(nn.Module):
    num_actions: int
    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = Torso(self.hidden_sizes, self.activation, self.cnn)(obs)
        return _dense(self.num_actions, 0.01)(x)  # logits


class GaussianPolicy(nn.Module):
    action_dim: int
    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = Torso(self.hidden_sizes, self.activation, self.cnn)(obs)
        mean = _dense(self.action_dim, 0.01)(x)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


class ValueNet(nn.Module):
    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = Torso(self.hidden_sizes, self.activation, self.cnn)(obs)
        return _dense(1, 1.0)(x)[..., 0]


class Networks(NamedTuple):
    init: Callable[[jax.Array], Params]
    policy: Callable[[Any, jax.Array], distrax.Distribution]
    value: Callable[[Any, jax.Array], jax.Array]


def uses_cnn(config: Any, spec: EnvSpec) -> bool:
    """Whether `config.network` ("auto", "mlp" or "cnn") means the CNN torso for `spec`.

    Raises:
      ConfigError: `network: cnn` for observations that are not `[height, width, channels]`.
    """
    if config.network == "auto":
        return len(spec.obs_shape) == 3
    if config.network == "cnn" and len(spec.obs_shape) != 3:
        raise ConfigError(
            f"network: cnn needs image observations [height, width, channels]; "
            f"{getattr(config, 'env', 'the environment')} gives shape {tuple(spec.obs_shape)} "
            "(use network=mlp or auto)"
        )
    return config.network == "cnn"


def make_networks(config: Any, spec: EnvSpec, with_value: bool = True) -> Networks:
    """Policy (and, if `with_value`, a separate critic) for the environment `spec`."""
    cnn = uses_cnn(config, spec)
    hidden = tuple(config.hidden_sizes)
    # The critic's widths: a field of the algorithms that learn one (none for GRPO).
    value_hidden = tuple(getattr(config, "value_hidden_sizes", None) or hidden)
    if spec.discrete:
        policy_net = CategoricalPolicy(spec.num_actions, hidden, config.activation, cnn)
        to_dist = lambda logits: distrax.Categorical(logits=logits)
    else:
        policy_net = GaussianPolicy(spec.num_actions, hidden, config.activation, cnn)
        to_dist = lambda out: distrax.MultivariateNormalDiag(out[0], jnp.exp(out[1]))
    value_net = ValueNet(value_hidden, config.activation, cnn)
    dummy = jnp.zeros((1, *spec.obs_shape), jnp.float32)

    def init(key: jax.Array) -> Params:
        k_pi, k_v = jax.random.split(key)
        pi = policy_net.init(k_pi, dummy)
        v = value_net.init(k_v, dummy) if with_value else None
        return Params(pi, v)

    def policy(params, obs):
        return to_dist(policy_net.apply(params, obs))

    def value(params, obs):
        return value_net.apply(params, obs)

    return Networks(init, policy, value)
