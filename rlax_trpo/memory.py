"""Memory (recurrent) networks: a GRU or LSTM between the torso and the head.

A memory network reads one step of a batch of environments at a time,

    x        = W_in torso(obs) + b_in          the torso (MLP or CNN) and every gate's input
                                               projection: nothing here reads the memory
    memory   = 0 where first, else memory      a new episode starts from the initial state
    memory, y = cell(memory, x)                GRU or LSTM of `memory_size` units: the
                                               recurrent product `h W_rec` and the gates
    output   = head(y)                         logits / Gaussian mean / value

and over a stored rollout `[T, B, ...]` by scanning the cell over time from the memory the
rollout started with (`sequence`): the torso, the input projections and the head run on the
whole sequence at once, and only one `[B, size] x [size, gates * size]` product per step is
left inside the scan (flax's cells do six (GRU) or eight (LSTM) per step, inputs included).
`first[t]` marks the steps whose observation begins an episode (the previous step terminated
or was truncated), so no information crosses an episode boundary, during the rollout or when
the learner re-runs it.

The cells compute flax's `GRUCell` and `LSTMCell` equations (the same gates, biases and
carry `(c, h)`), with each kernel's per-gate blocks side by side. Every block is drawn by
this library's LAPACK-free orthogonal initialiser: flax's default recurrent initialiser is a
LAPACK QR, which deadlocks jaxlib's CPU runtime under vmap (the same hang
docs/upstream/cpu_lapack_deadlock.md describes for the dense layers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.initializers import orthogonal
from rlax_trpo.layers import Torso, dense

CELLS = ("gru", "lstm")


class Memory(NamedTuple):
    """The memory of the policy and of the critic, `[B, ...]` leaves; None for a
    feed-forward network (and for the missing critic of GRPO)."""

    policy: Any
    value: Any


def memory_cells(config: Any) -> tuple[str | None, str | None]:
    """(policy cell, critic cell) of a config: "gru", "lstm" or None (feed-forward). The
    critic's `value_memory` defaults to the policy's `memory`."""
    cell = lambda name: None if name in (None, "none") else name
    policy = cell(getattr(config, "memory", "none"))
    value = getattr(config, "value_memory", None)
    return policy, cell(value if value is not None else policy)


def initial_memory(cell: str | None, size: int, batch: int) -> Any:
    """The initial state of `cell` for `batch` environments: zeros (an LSTM's (c, h)), or
    None for a feed-forward network (`cell` None)."""
    if cell is None:
        return None
    zeros = jnp.zeros((batch, size), jnp.float32)
    return (zeros, zeros) if cell == "lstm" else zeros


def reset_where(memory: Any, first: jax.Array) -> Any:
    """`memory` with the entries of environments where `first` (`[B]`) back at zeros, the
    initial state."""
    return jax.tree.map(lambda h: jnp.where(first[..., None], jnp.zeros_like(h), h), memory)


def _gate_blocks(gates: int):
    """Initialiser of a `[n, gates * size]` kernel: one orthogonal `[n, size]` block per gate
    (the matrices flax's cells would draw for their separate per-gate layers)."""
    block = orthogonal(1.0)

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        n, width = shape
        keys = jax.random.split(key, gates)
        return jnp.concatenate([block(k, (n, width // gates), dtype) for k in keys], axis=-1)

    return init


class MemoryNet(nn.Module):
    """torso -> cell -> head, with separately callable parts (`embed`, `step`, `output`).

    `head` is "logits" (`num_out` categories), "gaussian" (`num_out` action dimensions:
    mean and a state-independent log-std) or "value".
    """

    head: str
    num_out: int
    hidden_sizes: Sequence[int]
    activation: str
    cnn: bool
    cell: str
    size: int
    dtype: Any = jnp.float32  # of the torso; the cell and the head compute in float32
    layer_norm: bool = False  # of the torso's layers

    def setup(self):
        self.torso = Torso(
            self.hidden_sizes, self.activation, self.cnn, self.dtype, self.layer_norm
        )
        gates = 3 if self.cell == "gru" else 4  # GRU: r, z, n; LSTM: i, f, g, o
        # The input projection of every gate in one dense layer, applied by `embed` to the
        # whole sequence at once; only the recurrent product is left inside the scan.
        self.inputs = nn.Dense(gates * self.size, kernel_init=_gate_blocks(gates))
        self.recurrent = self.param(
            "recurrent_kernel", _gate_blocks(gates), (self.size, gates * self.size)
        )
        if self.cell == "gru":  # the recurrent bias of the candidate (inside r * (...))
            self.recurrent_bias = self.param("recurrent_bias", nn.initializers.zeros, (self.size,))
        gain = 1.0 if self.head == "value" else 0.01
        self.out = dense(1 if self.head == "value" else self.num_out, gain)
        if self.head == "gaussian":
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.num_out,))

    def embed(self, obs: jax.Array) -> jax.Array:
        """The torso and the gates' input projections (no memory involved)."""
        return self.inputs(self.torso(obs).astype(jnp.float32))

    def step(self, memory: Any, x: jax.Array, first: jax.Array) -> tuple[Any, jax.Array]:
        """One step of the cell from the embedded input `x`, reset where `first`."""
        memory = reset_where(memory, first)
        if self.cell == "gru":
            h = memory
            xr, xz, xn = jnp.split(x, 3, axis=-1)
            hr, hz, hn = jnp.split(h @ self.recurrent, 3, axis=-1)
            r = nn.sigmoid(xr + hr)
            z = nn.sigmoid(xz + hz)
            n = jnp.tanh(xn + r * (hn + self.recurrent_bias))
            h = (1.0 - z) * n + z * h
            return h, h
        c, h = memory
        i, f, g, o = jnp.split(x + h @ self.recurrent, 4, axis=-1)
        c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
        h = nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h

    def output(self, y: jax.Array) -> Any:
        out = self.out(y)
        if self.head == "value":
            return out[..., 0]
        if self.head == "gaussian":
            return out, jnp.broadcast_to(self.log_std, out.shape)
        return out

    def __call__(self, memory: Any, obs: jax.Array, first: jax.Array) -> tuple[Any, Any]:
        memory, y = self.step(memory, self.embed(obs), first)
        return memory, self.output(y)


class Recurrent(NamedTuple):
    """A memory network's pure functions (parameters first), for a batch `[B, ...]`.

    step(params, memory, obs, first) -> (memory, output)              one step
    sequence(params, memory0, obs, first) -> (states, outputs)          `[T, B, ...]` from
        memory0; `states[t]` is the memory after step t
    bootstrap(params, states, obs) -> output        each state read one more step, no reset
    embed / cell / output: the three parts (`scan_cells` runs several networks in one scan)
    """

    init: Any
    step: Any
    sequence: Any
    bootstrap: Any
    embed: Any  # (params, obs) -> features
    cell: Any  # (params, memory, features, first) -> (memory, y)
    output: Any  # (params, y) -> output


def scan_cells(
    nets: tuple[Recurrent, ...], params: tuple, memory0: tuple, obs: jax.Array, first: jax.Array
) -> tuple[tuple, tuple]:
    """Several memory networks over the same sequence `[T, B, ...]` in one scan over time
    (one loop, not one per network): the torsos and heads on every step at once, the cells
    stepped together. Returns (states after every step, outputs), a tuple entry per network."""
    features = tuple(net.embed(p, obs) for net, p in zip(nets, params, strict=True))

    def step(memories, xs):
        x, f = xs
        parts = zip(nets, params, memories, x, strict=True)
        out = [net.cell(p, m, xi, f) for net, p, m, xi in parts]
        memories = tuple(m for m, _ in out)
        return memories, (memories, tuple(y for _, y in out))

    _, (states, ys) = jax.lax.scan(step, tuple(memory0), (features, first))
    return states, tuple(net.output(p, y) for net, p, y in zip(nets, params, ys, strict=True))


def make_recurrent(net: MemoryNet, obs_shape: tuple[int, ...]) -> Recurrent:
    """The pure functions of `net` for observations of shape `obs_shape`."""

    def init(key: jax.Array) -> Any:
        dummy = jnp.zeros((1, *obs_shape), jnp.float32)
        memory = initial_memory(net.cell, net.size, 1)
        return net.init(key, memory, dummy, jnp.ones((1,), bool))

    def step(params, memory, obs, first):
        return net.apply(params, memory, obs, first)

    def embed(params, obs):
        return net.apply(params, obs, method=MemoryNet.embed)

    def cell(params, memory, x, first):
        return net.apply(params, memory, x, first, method=MemoryNet.step)

    def output(params, y):
        return net.apply(params, y, method=MemoryNet.output)

    def bootstrap(params, states, obs):
        return output(params, cell(params, states, embed(params, obs), no_reset(obs))[1])

    def no_reset(obs):
        return jnp.zeros(obs.shape[: obs.ndim - len(obs_shape)], bool)

    parts = Recurrent(init, step, None, bootstrap, embed, cell, output)

    def sequence(params, memory0, obs, first):
        (states,), (out,) = scan_cells((parts,), (params,), (memory0,), obs, first)
        return states, out

    return parts._replace(sequence=sequence)


def every_kth_environment(batch: Any, memory0: Any, fraction: float) -> tuple[Any, Any]:
    """Every k-th environment's whole sequence, k = round(1 / fraction) (the Fisher-vector
    product's subsample for memory policies: time order must stay whole)."""
    stride = max(1, int(np.round(1.0 / fraction)))
    return jax.tree.map(lambda x: x[:, ::stride], batch), jax.tree.map(
        lambda x: x[::stride], memory0
    )
