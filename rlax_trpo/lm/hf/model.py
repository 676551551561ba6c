"""Qwen2 / Qwen2.5, Qwen3 and Llama 3.x decoders in Linen, laid out as Hugging Face lays them out.

    embed -> L x [RMSNorm -> grouped-query attention (RoPE, optional q/k/v biases, optional
    q/k RMSNorm) -> + -> RMSNorm -> SwiGLU -> +] -> RMSNorm -> head (tied or untied)

The L layers are one `nn.scan` over stacked parameters (`[L, ...]` leaves under `layers`), so
a 28-layer model compiles about as fast as a 2-layer one. Matmuls run in `cfg.dtype`; RMSNorm,
RoPE, the softmax and the logits in float32.

The call has the contract of the tiny model (`rlax_trpo.lm.model.Transformer`), plus left
padding: `apply(params, tokens [B, S], start, cache, pad)`. Column j of `tokens` is slot
`start + j` of the KV cache (`[L, B, T, num_kv_heads, head_dim]`, key/value heads, not query
heads); row b's first `pad[b]` slots are left padding, masked out as keys, and its RoPE
position is the slot less `pad[b]` (what transformers' `generate` gives a left-padded batch),
so a padded prompt gives the logits of the same prompt unpadded.
"""

from __future__ import annotations

from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from rlax_trpo.lm.hf.config import DecoderConfig, rope_inverse_frequencies
from rlax_trpo.lm.model import KVCache

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def init_decoder_cache(cfg: DecoderConfig, batch_size: int, length: int) -> KVCache:
    """An all-zero cache of `length` slots for `batch_size` rows (unwritten slots are masked)."""
    shape = (cfg.num_layers, batch_size, length, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(jnp.zeros(shape, cfg.dtype), jnp.zeros(shape, cfg.dtype))


def rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    """x / sqrt(mean(x^2) + eps) * scale over the last axis, in float32 (Zhang & Sennrich
    2019), returned in x's dtype; transformers' `*RMSNorm` rounds to it before the scale."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (scale.astype(jnp.float32) * normed.astype(x.dtype).astype(jnp.float32)).astype(x.dtype)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotary embedding in transformers' rotate-half layout: with f = positions x inv_freq
    repeated twice along the head, x cos f + rotate_half(x) sin f, rotate_half(a, b) =
    (-b, a) for the two halves of the head. x: `[B, S, heads, D]`, positions `[B, S]`."""
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, S, D/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * jnp.cos(angles) + rotated * jnp.sin(angles)).astype(x.dtype)


class RMSNorm(nn.Module):
    eps: float
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        return rms_norm(x, scale, self.eps)


class Linear(nn.Module):
    """`x W (+ b)`, kernel `[in, out]`, plus a low-rank adapter `s (x A) B` when `rank > 0`
    (LoRA, Hu et al. 2021): A `[in, r]` Kaiming-uniform and B `[r, out]` zero as peft
    initialises them, so a new adapter changes nothing (the sum adds an exact 0); s = alpha / r.
    The adapter's parameters are float32 whatever `param_dtype` is."""

    features: int
    use_bias: bool
    dtype: str
    param_dtype: str
    rank: int = 0
    alpha: float = 16.0

    @nn.compact
    def __call__(self, x):
        kernel = self.param(
            "kernel", nn.initializers.normal(0.02), (x.shape[-1], self.features), self.param_dtype
        )
        y = jnp.dot(x.astype(self.dtype), kernel.astype(self.dtype))
        if self.use_bias:
            bias = self.param("bias", nn.initializers.zeros, (self.features,), self.param_dtype)
            y = y + bias.astype(self.dtype)
        if self.rank > 0:
            init_a = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
            a = self.param("lora_a", init_a, (x.shape[-1], self.rank), jnp.float32)
            b = self.param("lora_b", nn.initializers.zeros, (self.rank, self.features), jnp.float32)
            low = jnp.dot(jnp.dot(x.astype(self.dtype), a.astype(self.dtype)), b.astype(self.dtype))
            y = y + (self.alpha / self.rank) * low
        return y


def _linear(cfg: DecoderConfig, name: str, features: int, bias: bool) -> Linear:
    rank = cfg.lora_rank if name in cfg.lora_targets else 0
    return Linear(features, bias, cfg.dtype, cfg.param_dtype, rank, cfg.lora_alpha, name=name)


def grouped_attention(q, k, v, q_slots, k_slots, pad) -> jax.Array:
    """softmax(q k^T / sqrt(D) + mask) v with `G = H / KV` query heads per key/value head:
    q `[B, S, KV, G, D]`, k and v `[B, T, KV, D]`; a key at slot t is seen by a query at slot
    s of row b when pad[b] <= t <= s. Scores and softmax in float32; `[B, S, KV, G, D]`."""
    scores = jnp.einsum("bskgd,btkd->bkgst", q, k, preferred_element_type=jnp.float32)
    scores = scores * (q.shape[-1] ** -0.5)
    seen = (k_slots[None, None, :] <= q_slots[None, :, None]) & (
        k_slots[None, None, :] >= pad[:, None, None]
    )  # [B, S, T]
    scores = jnp.where(seen[:, None, None], scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgst,btkd->bskgd", weights, v)


class Attention(nn.Module):
    cfg: DecoderConfig

    @nn.compact
    def __call__(self, x, layer_cache, start, pad):
        cfg = self.cfg
        b, s, _ = x.shape
        kv, d = cfg.num_kv_heads, cfg.head_dim
        q = _linear(cfg, "q_proj", cfg.num_heads * d, cfg.qkv_bias)(x).reshape(b, s, -1, d)
        k = _linear(cfg, "k_proj", kv * d, cfg.qkv_bias)(x).reshape(b, s, kv, d)
        v = _linear(cfg, "v_proj", kv * d, cfg.qkv_bias)(x).reshape(b, s, kv, d)
        if cfg.qk_norm:
            q = RMSNorm(cfg.rms_norm_eps, cfg.param_dtype, name="q_norm")(q)
            k = RMSNorm(cfg.rms_norm_eps, cfg.param_dtype, name="k_norm")(k)
        q_slots = start + jnp.arange(s)
        positions = q_slots[None, :] - pad[:, None]
        inv_freq = jnp.asarray(rope_inverse_frequencies(cfg))
        q, k = apply_rope(q, positions, inv_freq), apply_rope(k, positions, inv_freq)
        if layer_cache is None:
            keys, values, k_slots = k, v, q_slots
        else:
            keys = jax.lax.dynamic_update_slice(
                layer_cache[0], k.astype(cfg.dtype), (0, start, 0, 0)
            )
            values = jax.lax.dynamic_update_slice(
                layer_cache[1], v.astype(cfg.dtype), (0, start, 0, 0)
            )
            k_slots, layer_cache = jnp.arange(keys.shape[1]), (keys, values)
        q = q.reshape(b, s, kv, cfg.group_size, d)
        out = grouped_attention(
            q, keys.astype(q.dtype), values.astype(q.dtype), q_slots, k_slots, pad
        )
        out = _linear(cfg, "o_proj", cfg.hidden_size, cfg.o_bias)(out.reshape(b, s, -1))
        return out, layer_cache


class Block(nn.Module):
    """One decoder layer, a step of the layer scan: `(x, layer_cache) -> (x, layer_cache)`."""

    cfg: DecoderConfig

    @nn.compact
    def __call__(self, x, layer_cache, start, pad):
        cfg = self.cfg
        h = RMSNorm(cfg.rms_norm_eps, cfg.param_dtype, name="input_layernorm")(x)
        h, layer_cache = Attention(cfg, name="self_attn")(h, layer_cache, start, pad)
        x = x + h
        h = RMSNorm(cfg.rms_norm_eps, cfg.param_dtype, name="post_attention_layernorm")(x)
        return x + MLP(cfg, name="mlp")(h), layer_cache


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x))."""

    cfg: DecoderConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        gate = _linear(cfg, "gate_proj", cfg.intermediate_size, cfg.mlp_bias)(x)
        up = _linear(cfg, "up_proj", cfg.intermediate_size, cfg.mlp_bias)(x)
        return _linear(cfg, "down_proj", cfg.hidden_size, cfg.mlp_bias)(nn.silu(gate) * up)


class DecoderLM(nn.Module):
    """`__call__(tokens [B, S], start=0, cache=None, pad=None) -> (logits [B, S, V] float32,
    cache)`; `hidden` and `logits` are its two halves (the chunked log-probs use them apart)."""

    cfg: DecoderConfig

    def setup(self):
        cfg = self.cfg
        self.embed_tokens = nn.Embed(
            cfg.vocab_size,
            cfg.hidden_size,
            embedding_init=nn.initializers.normal(0.02),
            param_dtype=cfg.param_dtype,
        )
        block = nn.remat(Block) if cfg.remat else Block
        self.layers = nn.scan(
            block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=(0, nn.broadcast, nn.broadcast),
            length=cfg.num_layers,
        )(cfg)
        self.norm = RMSNorm(cfg.rms_norm_eps, cfg.param_dtype)
        if not cfg.tie_word_embeddings:
            self.lm_head = Linear(cfg.vocab_size, False, cfg.dtype, cfg.param_dtype)

    def hidden(self, tokens, start=0, cache: KVCache | None = None, pad=None):
        """The final RMSNorm's output `[B, S, hidden]` (compute dtype) and the new cache."""
        chex.assert_rank(tokens, 2)
        pad = jnp.zeros(tokens.shape[0], jnp.int32) if pad is None else pad
        x = self.embed_tokens(tokens).astype(self.cfg.dtype)
        layer_caches = None if cache is None else (cache.k, cache.v)
        x, layer_caches = self.layers(x, layer_caches, start, pad)
        new_cache = None if cache is None else KVCache(*layer_caches)
        return self.norm(x), new_cache

    def logits(self, hidden) -> jax.Array:
        """`[..., V]` float32 logits of final hidden states."""
        if self.cfg.tie_word_embeddings:
            table = self.embed_tokens.embedding.astype(self.cfg.dtype)
            out = jnp.dot(hidden, table.T, preferred_element_type=jnp.float32)
        else:
            out = self.lm_head(hidden)
        return out.astype(jnp.float32)

    def __call__(self, tokens, start=0, cache: KVCache | None = None, pad=None):
        hidden, cache = self.hidden(tokens, start, cache, pad)
        return self.logits(hidden), cache


def init_decoder(cfg: DecoderConfig, key: jax.Array) -> dict[str, Any]:
    """Random parameters of `DecoderLM(cfg)` (std 0.02 normal kernels, unit norms)."""
    return DecoderLM(cfg).init(key, jnp.zeros((1, 1), jnp.int32))
