"""The layers every network here is built from: orthogonally initialised dense layers, a 3x3
convolution as a dense layer on patches, and the torso (MLP, or CNN then MLP); networks by
name (`register_network`), the attention network over a task's items and the convolutional
network over a task's board."""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.errors import ConfigError
from rlax_trpo.initializers import orthogonal

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


def dense(features: int, gain: float, dtype: Any = jnp.float32) -> nn.Dense:
    """A dense layer with float32 parameters that computes in `dtype` (float32, or bfloat16
    with `compute_dtype: bfloat16`: inputs and weights rounded to bfloat16 for the product,
    gradients back to the float32 weights)."""
    return nn.Dense(
        features,
        kernel_init=orthogonal(gain),
        bias_init=nn.initializers.zeros,
        dtype=dtype,
        param_dtype=jnp.float32,
    )


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
    """MLP on flat observations, or a small CNN (MinAtar: 10x10xC images) then an MLP; its
    activations are `dtype` (the observations are rounded to it first). With `layer_norm`,
    each MLP layer normalises its pre-activations over the features (Ba et al. 2016, with a
    learned scale and offset) before the nonlinearity."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False
    dtype: Any = jnp.float32
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        x = obs.astype(self.dtype)
        if self.cnn:  # a 3x3 'SAME' convolution
            x = nn.relu(dense(16, np.sqrt(2), self.dtype)(patches_3x3(x)))
            x = x.reshape(x.shape[:-3] + (-1,))
        for size in self.hidden_sizes:
            x = dense(size, np.sqrt(2), self.dtype)(x)
            if self.layer_norm:
                x = nn.LayerNorm(dtype=self.dtype, param_dtype=jnp.float32)(x)
            x = act(x)
        return x


# Networks by name: `network: <name>` in a configuration. The built-in names choose this
# module's torso; a registered name (`register_network`) builds the policy and the critic
# from the user's Flax module, with this library's heads on a torso ("features") or as the
# whole network ("heads"). Masks, distributions and the critic's loss stay the library's.
BUILTIN_NETWORKS = ("auto", "mlp", "cnn")
OUTPUTS = ("features", "heads")


class NetworkEntry(NamedTuple):
    factory: Callable[..., nn.Module]
    outputs: str  # "features": a torso, the heads are added; "heads": the whole network
    raw_obs: Callable[[dict], str] | None = None  # kwargs -> why it needs unnormalised obs


_NETWORKS: dict[str, NetworkEntry] = {}


def register_network(
    name: str, factory: Callable[..., nn.Module], outputs: str = "features", raw_obs=None
):
    """Register a network under `name`, for `network: <name>` (and `network_kwargs:`).

    `outputs="features"`: `factory(spec, **network_kwargs)` returns a Flax module mapping
    observations `[..., *spec.obs_shape]` (as the environment gives them) to features
    `[..., F]`; it is called once for the policy and once for the critic (separate
    parameters), and the heads go on top (orthogonal, gains 0.01 and 1.0; a Gaussian's
    state-independent log-std). `outputs="heads"`: `factory(spec, role, **network_kwargs)`
    with `role` "policy" or "value" returns the whole network: logits `[..., num_actions]`
    (discrete), the mean `[..., num_actions]` (continuous; the log-std is added) or values
    `[...]`. A module of a plugin (`imports:`) registers it, so a run folder rebuilds it.
    `raw_obs(network_kwargs)`, if given, names why these arguments need the observations
    unnormalised ("" when they do not): `normalize_obs: true` is then refused.
    """
    if not isinstance(name, str) or not name or name in BUILTIN_NETWORKS:
        raise ValueError(f"register_network: {name!r} must be a new non-empty name")
    if outputs not in OUTPUTS:
        raise ValueError(f"register_network: outputs must be one of {OUTPUTS} (got {outputs!r})")
    _NETWORKS[name] = NetworkEntry(factory, outputs, raw_obs)


def network_names() -> list[str]:
    return [*BUILTIN_NETWORKS, *sorted(_NETWORKS)]


def check_network(name: str, kwargs: dict[str, Any], memory=False, normalize_obs=False) -> None:
    """A one-line ConfigError for an unknown network name (with the nearest one), keyword
    arguments its factory does not take, a registered network asked for memory, or one
    that reads raw observations asked to normalise them."""
    if name in BUILTIN_NETWORKS:
        if kwargs:
            raise ConfigError(f"network_kwargs: read by registered networks only, not {name}")
        return
    if name not in _NETWORKS:
        close = difflib.get_close_matches(name, network_names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"network: unknown network {name!r} ({hint}known: {', '.join(network_names())})"
        )
    if memory:
        raise ConfigError(f"memory: network {name} (registered) has no memory cell; use none")
    entry = _NETWORKS[name]
    fixed = (None,) if entry.outputs == "features" else (None, "policy")
    try:
        inspect.signature(entry.factory).bind(*fixed, **kwargs)
    except TypeError as err:
        raise ConfigError(f"network_kwargs: network {name} does not take them ({err})") from None
    why = entry.raw_obs(kwargs) if entry.raw_obs and normalize_obs else ""
    if why:
        raise ConfigError(f"normalize_obs: network {name} {why}; use normalize_obs=false")


def named_networks(name: str, kwargs: dict[str, Any], spec: Any, head: str) -> tuple:
    """The registered network `name` as (the policy with `head` "logits" or "gaussian",
    the critic) for `spec`."""
    return tuple(_named(name, kwargs, spec, h) for h in (head, "value"))


def _named(name: str, kwargs: dict[str, Any], spec: Any, head: str) -> nn.Module:
    entry = _NETWORKS[name]
    role = "value" if head == "value" else "policy"
    args = (spec,) if entry.outputs == "features" else (spec, role)
    num_out = 1 if head == "value" else spec.num_actions
    net = OnNetwork(entry.factory(*args, **kwargs), head, num_out, entry.outputs == "features")
    dummy = jnp.zeros((1, *spec.obs_shape), jnp.float32)
    out = jax.eval_shape(lambda: net.init_with_output(jax.random.key(0), dummy)[0])
    got = tuple(jax.tree.leaves(out)[0].shape)
    want = (1,) if head == "value" else (1, num_out)
    if got != want:
        what = "values" if head == "value" else f"{num_out} outputs, one per action"
        raise ConfigError(
            f"network: {name}'s {role} gives shape {got} for one observation; "
            f"expected {want} ({what})"
        )
    return net


class OnNetwork(nn.Module):
    """A registered module with this library's heads: a dense layer on its features (when
    `features`), and a Gaussian policy's learned log-std."""

    net: nn.Module
    head: str  # logits | gaussian | value
    num_out: int
    features: bool

    @nn.compact
    def __call__(self, obs: jax.Array) -> Any:
        out = self.net(obs)
        if self.features:
            out = dense(self.num_out, 1.0 if self.head == "value" else 0.01)(out)
            out = out[..., 0] if self.head == "value" else out
        out = out.astype(jnp.float32)
        if self.head == "gaussian":
            log_std = self.param("log_std", nn.initializers.zeros, (self.num_out,))
            return out, jnp.broadcast_to(log_std, out.shape)
        return out


class ItemAttention(nn.Module):
    """Self-attention over the items of a structured observation (Knapsack's weights and
    values, TSP's cities), registered as `network: item_attention`.

    The flat observation is cut back into its fields (`EnvSpec.obs_fields`); a field whose
    leading size is `items` gives each item features, the others (positions, counters) a
    context added to every item's embedding. `blocks` pre-norm Transformer blocks (Vaswani
    et al. 2017) of `heads` heads mix the items. The policy's logits are one per item when
    the actions are the items (Knapsack's, TSP's), otherwise a dense layer on the items'
    mean; the critic reads the mean. Parameters: width, heads, blocks, items (default the
    number of actions).
    """

    fields: tuple  # ((name, shape), ...) of the flat observation, in its order
    items: int
    num_out: int  # 1 for the critic
    role: str
    width: int = 64
    heads: int = 4
    blocks: int = 2

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        batch, per_item, context, at = obs.shape[:-1], [], [], 0
        for _, shape in self.fields:
            size = math.prod(shape)
            part, at = obs[..., at : at + size], at + size
            if shape and shape[0] == self.items:
                per_item.append(part.reshape(*batch, self.items, size // self.items))
            else:
                context.append(part)
        h = dense(self.width, np.sqrt(2))(jnp.concatenate(per_item, axis=-1))
        if context:
            h = h + dense(self.width, np.sqrt(2))(jnp.concatenate(context, axis=-1))[..., None, :]
        for _ in range(self.blocks):
            y = nn.LayerNorm()(h)
            h = h + nn.MultiHeadDotProductAttention(self.heads, qkv_features=self.width)(y, y)
            y = nn.LayerNorm()(h)
            h = h + dense(self.width, 1.0)(nn.relu(dense(2 * self.width, np.sqrt(2))(y)))
        h = nn.LayerNorm()(h)
        if self.role == "policy" and self.num_out == self.items:
            return dense(1, 0.01)(h)[..., 0]
        out = dense(self.num_out, 0.01 if self.role == "policy" else 1.0)(h.mean(axis=-2))
        return out if self.role == "policy" else out[..., 0]


def item_attention(spec: Any, role: str, width=64, heads=4, blocks=2, items=None):
    items = int(items or spec.num_actions)
    fields = tuple(getattr(spec, "obs_fields", ()) or ())
    if not spec.discrete or not any(s and s[0] == items for _, s in fields):
        raise ConfigError(
            f"network: item_attention needs discrete actions and an observation of fields "
            f"with {items} items each (Jumanji's Knapsack, TSP)"
        )
    num_out = spec.num_actions if role == "policy" else 1
    return ItemAttention(fields, items, num_out, role, width, heads, blocks)


register_network("item_attention", item_attention, outputs="heads")


def _split_fields(obs: jax.Array, fields: tuple, board: int) -> tuple[list, list]:
    """The flat observation's fields `[..., H, W, C]` of the board's height and width (a
    field `[H, W]` is one channel; field `board` first), and the others flat."""
    batch, planes, context, at = obs.shape[:-1], [], [], 0
    hw = tuple(fields[board][1][:2])
    for i, (_, shape) in enumerate(fields):
        size = math.prod(shape)
        part = obs[..., at : at + size]
        at += size
        if tuple(shape[:2]) == hw:
            plane = part.reshape(*batch, *hw, size // math.prod(hw))
            planes.insert(0, plane) if i == board else planes.append(plane)
        else:
            context.append(part)
    return planes, context


class GridCNN(nn.Module):
    """3x3 convolutions over a board (Minesweeper's cells, Snake's grid), registered as
    `network: grid`.

    The flat observation is cut back into its fields (`EnvSpec.obs_fields`): the board is
    the field `grid` (default the first of two or more dimensions), and every field of the
    board's height and width joins it as channels (an action mask of cells); the others
    (counters) give a context added to every cell. With `categories: [low, count]` the
    board's values are integers low .. low+count-1, each one-hot (Minesweeper's -1 for a
    hidden cell, 0-8 mines around): they need `normalize_obs: false`. The policy's logits
    are one per cell (a 1x1 convolution, row-major) when the actions are the cells,
    otherwise a dense layer on the flattened features; the critic reads those. Parameters:
    grid, categories, channels (default [32, 32]), width (64).
    """

    fields: tuple
    grid: int  # index of the board in `fields`
    categories: tuple  # (low, count), or () for values as they are
    num_out: int
    role: str
    channels: tuple = (32, 32)
    width: int = 64

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        hw = tuple(self.fields[self.grid][1][:2])
        planes, context = _split_fields(obs, self.fields, self.grid)
        if self.categories:
            low, count = self.categories
            board = planes[0].reshape(*planes[0].shape[:-1], -1, 1)  # [..., H, W, C, 1]
            onehot = jnp.round(board) - low == jnp.arange(count)
            planes[0] = onehot.reshape(*planes[0].shape[:-1], -1).astype(jnp.float32)
        h = jnp.concatenate(planes, axis=-1)
        for i, c in enumerate(self.channels):
            h = dense(c, np.sqrt(2))(patches_3x3(h))
            if i == 0 and context:
                h = h + dense(c, np.sqrt(2))(jnp.concatenate(context, axis=-1))[..., None, None, :]
            h = nn.relu(h)
        if self.role == "policy" and self.num_out == math.prod(hw):
            return dense(1, 0.01)(h)[..., 0].reshape(*h.shape[:-3], -1)
        h = nn.relu(dense(self.width, np.sqrt(2))(h.reshape(*h.shape[:-3], -1)))
        out = dense(self.num_out, 0.01 if self.role == "policy" else 1.0)(h)
        return out if self.role == "policy" else out[..., 0]


def grid(spec: Any, role: str, grid=None, categories=None, channels=(32, 32), width=64):
    fields = tuple(getattr(spec, "obs_fields", ()) or ())
    names = [name for name, _ in fields]
    boards = [i for i, (_, s) in enumerate(fields) if len(s) >= 2]
    at = names.index(grid) if grid in names else (boards[0] if boards and grid is None else -1)
    if at < 0 or len(fields[at][1]) < 2:
        known = ", ".join(names[i] for i in boards) or "none"
        raise ConfigError(
            f"network: grid needs a board field of two or more dimensions "
            f"(got grid={grid!r}; this observation's boards: {known})"
        )
    ints = isinstance(categories, (list, tuple)) and all(type(c) is int for c in categories)
    cats = tuple(categories) if categories and ints else ()
    if categories and (len(cats) != 2 or cats[1] < 1):
        raise ConfigError(f"network_kwargs.categories: expected [low, count] (got {categories})")
    num_out = spec.num_actions if role == "policy" else 1
    return GridCNN(fields, at, cats, num_out, role, tuple(channels), int(width))


def _grid_raw_obs(kwargs: dict) -> str:
    return "reads categories of the raw board" if kwargs.get("categories") else ""


register_network("grid", grid, outputs="heads", raw_obs=_grid_raw_obs)
