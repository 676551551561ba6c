"""Linen policy and value networks, separate, with orthogonal initialisation.

`make_networks(config, spec)` returns `Networks(init, policy, value, spec, memory)`:
  * `init(key) -> Params(policy, value)`
  * `policy(policy_params, obs) -> distrax.Distribution` over actions for obs `[..., *obs_shape]`
    (Categorical for discrete actions; diagonal Gaussian with a learned state-independent
    log-std for continuous ones, Huang et al. 2022 detail 3 of the continuous list)
  * `value(value_params, obs) -> [...]`
  * `memory`: None, or with `memory: gru | lstm` the state-carrying step and sequence
    functions (`MemoryFunctions`)
The torso is an MLP, a CNN, or a network registered by name (`rlax_trpo.layers`).
Initialisation follows the PPO implementation details: orthogonal, gain sqrt(2) for hidden
layers, 0.01 for the policy head and 1.0 for the value head, biases zero, without LAPACK
(`rlax_trpo.initializers`: a vmapped LAPACK QR deadlocks jaxlib's CPU runtime).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp

from rlax_trpo.envs import EnvSpec
from rlax_trpo.errors import ConfigError
from rlax_trpo.layers import BUILTIN_NETWORKS, Torso, dense, named_networks
from rlax_trpo.memory import (
    Memory,
    MemoryNet,
    initial_memory,
    make_recurrent,
    memory_cells,
    scan_cells,
)
from rlax_trpo.types import Params


class CategoricalPolicy(nn.Module):
    num_actions: int
    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False
    dtype: Any = jnp.float32  # of the activations; the logits are float32
    layer_norm: bool = False  # of the torso's layers

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = Torso(self.hidden_sizes, self.activation, self.cnn, self.dtype, self.layer_norm)(obs)
        return dense(self.num_actions, 0.01, self.dtype)(x).astype(jnp.float32)  # logits


class GaussianPolicy(nn.Module):
    action_dim: int
    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False
    dtype: Any = jnp.float32  # of the activations; the mean is float32
    layer_norm: bool = False  # of the torso's layers

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = Torso(self.hidden_sizes, self.activation, self.cnn, self.dtype, self.layer_norm)(obs)
        mean = dense(self.action_dim, 0.01, self.dtype)(x).astype(jnp.float32)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return mean, jnp.broadcast_to(log_std, mean.shape)


class ValueNet(nn.Module):
    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False
    dtype: Any = jnp.float32  # of the activations; the values are float32
    layer_norm: bool = False  # of the torso's layers

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = Torso(self.hidden_sizes, self.activation, self.cnn, self.dtype, self.layer_norm)(obs)
        return dense(1, 1.0, self.dtype)(x)[..., 0].astype(jnp.float32)


class MemoryFunctions(NamedTuple):
    """The state-carrying functions of networks with memory (`memory: gru | lstm`).

    A memory network reads one step of a batch of environments `[B, ...]` (`*_step`) or a
    stored time-major rollout `[T, B, ...]` from the memory it started with (`*_sequence`,
    `rlax_trpo.memory`). A feed-forward part of a pair with memory (e.g. a critic without)
    ignores the state it is given.

      initial(batch) -> Memory                           both networks' initial state
      policy_step(params, memory, obs, first) -> (memory, distribution)
      value_step(params, memory, obs, first) -> (memory, values)
      policy_sequence(params, memory0, obs, first) -> distribution `[T, B]`
      value_sequence(params, memory0, obs, first, final_obs=None) -> (V, V(final_obs))
      joint_sequence(Params, Memory, obs, first) -> (distribution, values), in one scan
    """

    initial: Callable[[int], Memory]
    policy_step: Callable[..., Any]
    value_step: Callable[..., Any]
    policy_sequence: Callable[..., Any]
    value_sequence: Callable[..., Any]
    joint_sequence: Callable[..., Any]


class Networks(NamedTuple):
    """The policy and critic of a run, as pure functions of their parameters.

    Feed-forward networks read observations of any batch shape: `policy(params, obs)`,
    `value(params, obs)`. Networks with memory carry a state as well: `memory` holds their
    step and sequence functions (`MemoryFunctions`), and `policy`/`value` refuse to run
    without it. Code reading a stored batch goes through `policy_on`, `value_on` and
    `policy_and_value_on` (and `BatchLayout`), so it never asks which kind it has.
    """

    init: Callable[[jax.Array], Params]
    policy: Callable[[Any, jax.Array], distrax.Distribution]
    value: Callable[[Any, jax.Array], jax.Array]
    spec: EnvSpec | None = None  # the environment's observations and actions
    memory: MemoryFunctions | None = None  # None: neither network has memory

    @property
    def recurrent(self) -> bool:
        return self.memory is not None


class Categorical(distrax.Categorical):
    """distrax's Categorical, sampled without its check that the probabilities are finite.

    distrax tests the softmax for finite, non-negative entries on every draw (an invalid
    one draws -1) and picks the log-probability by a one-hot product: six of the 46 kernels
    a CartPole rollout step launches (`benchmarks/profile_ppo.py`). Same bits as distrax's
    for finite logits (`tests/test_networks.py`); non-finite ones mean a diverged run, which
    the training loop reports (`train/finite`).
    """

    def _sample_n(self, key: jax.Array, n: int) -> jax.Array:
        shape = (n,) + self.logits.shape[:-1]
        return jax.random.categorical(key, self.logits, axis=-1, shape=shape).astype(self._dtype)

    def _sample_n_and_log_prob(self, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
        draws = self._sample_n(key, n)
        log_probs = jnp.broadcast_to(self.logits, (n,) + self.logits.shape)
        picked = jnp.take_along_axis(log_probs, draws[..., None].astype(jnp.int32), axis=-1)
        return draws, picked[..., 0]


ILLEGAL_LOGIT = -1e9  # an illegal action's logit: probability exactly 0 in float32, finite


class MaskedCategorical(Categorical):
    """A Categorical over the legal actions of each state (`masked`).

    An illegal action's logit is `ILLEGAL_LOGIT`, so its probability is exactly 0: it is
    never sampled nor the mode, and the entropy, the KL divergence (distrax counts 0 log 0 as
    0) and their derivatives are those of the distribution over the legal actions, with no
    gradient into the illegal logits. `legal` `[..., K]` is kept for what must know the set
    itself (the log barrier's uniform policy, `losses.log_barrier`).
    """

    def __init__(self, logits: jax.Array, legal: jax.Array, dtype: Any = int):
        super().__init__(logits=jnp.where(legal, logits, ILLEGAL_LOGIT), dtype=dtype)
        self.legal = legal


def masked(dist: Any, action_mask: jax.Array | None) -> Any:
    """`dist` restricted to the actions `action_mask` (bool `[..., K]`) marks legal; None:
    `dist` itself. A state where no action is legal keeps every action (its mask is
    ignored there): the environment is then free to do what it does with any action, and
    the distribution stays a distribution (no NaN)."""
    if action_mask is None:
        return dist
    mask = jnp.asarray(action_mask, bool)
    legal = mask | ~mask.any(-1, keepdims=True)
    return MaskedCategorical(dist.logits, legal, dist.dtype)


def policy_on(networks: Networks, params: Any, batch: Any) -> distrax.Distribution:
    """The policy's distribution at every step of `batch` (a `Batch` or anything with `obs`,
    `first`, `memory` and `action_mask`): each observation alone, or each stored sequence
    re-run from the memory it started with; over the stored legal actions, if any."""
    if batch.memory is None:
        return masked(networks.policy(params, batch.obs), batch.action_mask)
    dist = networks.memory.policy_sequence(params, batch.memory.policy, batch.obs, batch.first)
    return masked(dist, batch.action_mask)


def policy_and_value_on(networks: Networks, params: Params, batch: Any) -> tuple[Any, Any]:
    """`(policy_on, value_on)` of one `Params`; with memory both re-run in one scan."""
    if batch.memory is None:
        dist = networks.policy(params.policy, batch.obs)
        return masked(dist, batch.action_mask), networks.value(params.value, batch.obs)
    dist, values = networks.memory.joint_sequence(params, batch.memory, batch.obs, batch.first)
    return masked(dist, batch.action_mask), values


def value_on(networks: Networks, params: Any, batch: Any) -> jax.Array:
    """The critic's values at every step of `batch` (as `policy_on`)."""
    return values_and_bootstrap(networks, params, batch)[0]


def values_and_bootstrap(
    networks: Networks, params: Any, batch: Any, final_obs: jax.Array | None = None
) -> tuple[jax.Array, jax.Array | None]:
    """(V at every step of `batch`, V(`final_obs`) or None): with memory, V(final_obs[t])
    continues the episode of step t from the memory after it (no reset)."""
    if batch.memory is None:
        values = networks.value(params, batch.obs)
        return values, None if final_obs is None else networks.value(params, final_obs)
    memory = networks.memory
    return memory.value_sequence(params, batch.memory.value, batch.obs, batch.first, final_obs)


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
    # The torsos' (and feed-forward heads') arithmetic; parameters are float32 either way.
    dtype = jnp.dtype(getattr(config, "compute_dtype", "float32"))
    ln = bool(getattr(config, "layer_norm", False))  # in the policy's torso (and critic's)
    hidden = tuple(config.hidden_sizes)
    # The critic's widths, normalisation and memory: fields of the algorithms that learn one.
    value_hidden = tuple(getattr(config, "value_hidden_sizes", None) or hidden)
    value_ln = getattr(config, "value_layer_norm", None)
    value_ln = ln if value_ln is None else bool(value_ln)
    policy_cell, value_cell = memory_cells(config)
    size = getattr(config, "memory_size", 0)
    if spec.discrete:
        policy_net = CategoricalPolicy(
            spec.num_actions, hidden, config.activation, cnn, dtype, layer_norm=ln
        )
        to_dist = lambda logits: Categorical(logits=logits)
        head = "logits"
    else:
        policy_net = GaussianPolicy(
            spec.num_actions, hidden, config.activation, cnn, dtype, layer_norm=ln
        )
        to_dist = lambda out: distrax.MultivariateNormalDiag(out[0], jnp.exp(out[1]))
        head = "gaussian"
    value_net = ValueNet(value_hidden, config.activation, cnn, dtype, layer_norm=value_ln)
    if config.network not in BUILTIN_NETWORKS:  # registered by name (no memory: checked)
        policy_net, value_net = named_networks(config.network, config.network_kwargs, spec, head)
    dummy = jnp.zeros((1, *spec.obs_shape), jnp.float32)
    if policy_cell is None and (value_cell is None or not with_value):
        return _feed_forward(policy_net, value_net, to_dist, dummy, with_value, spec)

    def part(ff_net, cell, head, hidden_sizes, norm):
        if cell is None:
            return None, ff_net
        net = MemoryNet(
            head, spec.num_actions, hidden_sizes, config.activation, cnn, cell, size, dtype, norm
        )
        return make_recurrent(net, spec.obs_shape), None

    pi_rec, pi_ff = part(policy_net, policy_cell, head, hidden, ln)
    v_cell = value_cell if with_value else None
    v_rec, v_ff = part(value_net, v_cell, "value", value_hidden, value_ln)

    def init(key: jax.Array) -> Params:
        k_pi, k_v = jax.random.split(key)
        pi = pi_rec.init(k_pi) if pi_rec else pi_ff.init(k_pi, dummy)
        v = (v_rec.init(k_v) if v_rec else v_ff.init(k_v, dummy)) if with_value else None
        return Params(pi, v)

    def memory(batch: int) -> Memory:
        value_cell_ = value_cell if with_value else None
        return Memory(
            initial_memory(policy_cell, size, batch), initial_memory(value_cell_, size, batch)
        )

    def policy_step(params, mem, obs, first):
        if pi_rec is None:
            return mem, to_dist(pi_ff.apply(params, obs))
        mem, out = pi_rec.step(params, mem, obs, first)
        return mem, to_dist(out)

    def value_step(params, mem, obs, first):
        if v_rec is None:
            return mem, value_net.apply(params, obs)
        return v_rec.step(params, mem, obs, first)

    def policy_sequence(params, mem0, obs, first):
        if pi_rec is None:
            return to_dist(pi_ff.apply(params, obs))
        return to_dist(pi_rec.sequence(params, mem0, obs, first)[1])

    def value_sequence(params, mem0, obs, first, final_obs=None):
        if v_rec is None:
            values = value_net.apply(params, obs)
            return values, None if final_obs is None else value_net.apply(params, final_obs)
        states, values = v_rec.sequence(params, mem0, obs, first)
        # V(final_obs[t]) continues the episode of step t: the memory after step t, no reset.
        return values, None if final_obs is None else v_rec.bootstrap(params, states, final_obs)

    def joint_sequence(params, mem0, obs, first):
        if pi_rec is None or v_rec is None:
            dist = policy_sequence(params.policy, mem0.policy, obs, first)
            return dist, value_sequence(params.value, mem0.value, obs, first)[0]
        _, (out, values) = scan_cells(
            (pi_rec, v_rec), tuple(params), (mem0.policy, mem0.value), obs, first
        )
        return to_dist(out), values

    def no_memory(*_):
        raise TypeError("a memory policy needs its state: use policy_step or policy_sequence")

    fns = MemoryFunctions(
        memory, policy_step, value_step, policy_sequence, value_sequence, joint_sequence
    )
    return Networks(
        init,
        no_memory if pi_rec else lambda params, obs: to_dist(pi_ff.apply(params, obs)),
        no_memory if v_rec else value_net.apply,
        spec,
        fns,
    )


def _feed_forward(policy_net, value_net, to_dist, dummy, with_value, spec) -> Networks:
    def init(key: jax.Array) -> Params:
        k_pi, k_v = jax.random.split(key)
        pi = policy_net.init(k_pi, dummy)
        v = value_net.init(k_v, dummy) if with_value else None
        return Params(pi, v)

    def policy(params, obs):
        return to_dist(policy_net.apply(params, obs))

    def value(params, obs):
        return value_net.apply(params, obs)

    return Networks(init, policy, value, spec)
