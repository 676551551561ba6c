"""A small decoder-only transformer (Linen) with an explicit, functional KV cache.

One `__call__` serves both uses:
  * full forward (training, scoring):  `logits, _ = model.apply(params, tokens)`
    with causal attention over the `S` given tokens;
  * cached decoding (sampling): `logits, cache = model.apply(params, tokens, start, cache)`
    writes the keys/values of the `S` new tokens at positions `start .. start+S-1` of a
    preallocated `[layers, B, T, heads, head_dim]` cache and attends to every cached
    position `<=` the query's position.
The cache is a plain pytree argument and result (no mutable Linen collections), so the
sampler is an ordinary `lax.scan` and both paths share every line of the attention maths.
Logits (and attention scores) are float32 whatever the compute dtype, float64 in a float64 check.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp


class ModelConfig(NamedTuple):
    """Static shape of the transformer.

    Attributes:
      vocab_size: number of token ids.
      max_len: longest sequence (prompt + completion) the positional table covers.
      num_layers, d_model, num_heads: depth, width, attention heads (d_model % heads == 0).
      mlp_ratio: hidden width of the MLP as a multiple of d_model.
      dtype: compute dtype name ("float32" or "bfloat16"; "float64" under jax_enable_x64, for
        checks); params and logits stay float32 (float64 for "float64").
    """

    vocab_size: int
    max_len: int
    num_layers: int = 2
    d_model: int = 64
    num_heads: int = 4
    mlp_ratio: int = 4
    dtype: str = "float32"


class KVCache(NamedTuple):
    """Keys and values of every layer, `[num_layers, B, max_len, num_heads, head_dim]`."""

    k: jax.Array
    v: jax.Array


def init_cache(config: ModelConfig, batch_size: int) -> KVCache:
    """An all-zero cache for `batch_size` sequences (positions are masked until written)."""
    head_dim = config.d_model // config.num_heads
    shape = (config.num_layers, batch_size, config.max_len, config.num_heads, head_dim)
    dtype = jnp.dtype(config.dtype)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def causal_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_pos: jax.Array,
    k_pos: jax.Array,
    pad: jax.Array | None = None,
) -> jax.Array:
    """Masked scaled dot-product attention (Vaswani et al. 2017).

        out = softmax(q k^T / sqrt(d) + mask) v,
        mask[b, s, t] = 0 if pad[b] <= k_pos[t] <= q_pos[s] else -inf

    Args:
      q: `[B, S, H, D]`; k, v: `[B, T, H, D]`; q_pos: `[S]`; k_pos: `[T]` (cache slots);
      pad: `[B]` left-padding slots of each row, never attended to (None: none).

    Returns:
      `[B, S, H, D]`. The softmax runs in float32.
    """
    chex.assert_rank([q, k, v], 4)
    chex.assert_equal_shape([k, v])
    wide = jnp.promote_types(jnp.float32, q.dtype)  # float32, or float64 in float64 checks
    scores = jnp.einsum("bshd,bthd->bhst", q, k).astype(wide)
    scores = scores / jnp.sqrt(wide.type(q.shape[-1]))
    allowed = (k_pos[None, :] <= q_pos[:, None])[None]  # [1, S, T]
    if pad is not None:
        allowed = allowed & (k_pos[None, None, :] >= pad[:, None, None])
    scores = jnp.where(allowed[:, None], scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhst,bthd->bshd", weights, v)


class Attention(nn.Module):
    """Causal multi-head self-attention, writing its keys and values into a layer's KV cache
    at position `start` when it is given one."""

    num_heads: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x, start, layer_cache, pad=None):
        batch, length, width = x.shape
        head_dim = width // self.num_heads
        dense = lambda feats, axis, name: nn.DenseGeneral(
            feats, axis=axis, dtype=self.dtype, name=name
        )
        q, k, v = (dense((self.num_heads, head_dim), -1, n)(x) for n in ("query", "key", "value"))
        q_pos = start + jnp.arange(length)
        if layer_cache is None:
            keys, values, k_pos, new_cache = k, v, q_pos, None
        else:
            cache_k, cache_v = layer_cache
            keys = jax.lax.dynamic_update_slice(cache_k, k.astype(cache_k.dtype), (0, start, 0, 0))
            values = jax.lax.dynamic_update_slice(
                cache_v, v.astype(cache_v.dtype), (0, start, 0, 0)
            )
            k_pos, new_cache = jnp.arange(keys.shape[1]), (keys, values)
        out = causal_attention(q, keys, values, q_pos, k_pos, pad)
        return dense(width, (-2, -1), "out")(out), new_cache


class Block(nn.Module):
    """One pre-LayerNorm transformer block: attention, then a GELU MLP, each residual."""

    num_heads: int
    mlp_ratio: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x, start, layer_cache, pad=None):
        h, new_cache = Attention(self.num_heads, self.dtype)(
            nn.LayerNorm(dtype=self.dtype)(x), start, layer_cache, pad
        )
        x = x + h
        h = nn.Dense(self.mlp_ratio * x.shape[-1], dtype=self.dtype)(
            nn.LayerNorm(dtype=self.dtype)(x)
        )
        x = x + nn.Dense(x.shape[-1], dtype=self.dtype)(nn.gelu(h))
        return x, new_cache


class Transformer(nn.Module):
    """Pre-LayerNorm decoder-only transformer with learned positions.

    `__call__(tokens [B, S], start=0, cache=None, pad=None) -> (logits [B, S, V] float32,
    cache)`; a row's first `pad[b]` slots are left padding: masked as keys, and its positions
    count from the first slot after them.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, tokens: jax.Array, start=0, cache: KVCache | None = None, pad=None):
        cfg = self.config
        chex.assert_rank(tokens, 2)
        positions = (start + jnp.arange(tokens.shape[1]))[None]
        if pad is not None:
            positions = jnp.maximum(positions - pad[:, None], 0)
        x = nn.Embed(cfg.vocab_size, cfg.d_model, name="embed")(tokens)
        x = x + nn.Embed(cfg.max_len, cfg.d_model, name="pos_embed")(positions)
        x = x.astype(cfg.dtype)
        new_k, new_v = [], []
        for layer in range(cfg.num_layers):
            layer_cache = None if cache is None else (cache.k[layer], cache.v[layer])
            x, layer_cache = Block(cfg.num_heads, cfg.mlp_ratio, cfg.dtype, name=f"block_{layer}")(
                x, start, layer_cache, pad
            )
            if cache is not None:
                new_k.append(layer_cache[0])
                new_v.append(layer_cache[1])
        x = nn.LayerNorm(dtype=cfg.dtype, name="final_norm")(x)
        logits = nn.Dense(cfg.vocab_size, dtype=cfg.dtype, name="head")(x)
        logits = logits.astype(jnp.promote_types(jnp.float32, cfg.dtype))
        new_cache = None if cache is None else KVCache(jnp.stack(new_k), jnp.stack(new_v))
        return logits, new_cache


def init_params(model: Transformer, key: jax.Array):
    """Parameters for `model` from a typed key (a length-1 dummy sequence fixes the shapes)."""
    return model.init(key, jnp.zeros((1, 1), jnp.int32))
