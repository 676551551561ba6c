"""Autoregressive sampling with a KV cache inside `lax.scan`, and full-forward scoring.

The sampler prefills the cache with the prompt in one forward pass, then runs a scan of
`max_new_tokens` steps: sample a token from `softmax(logits / temperature)` (or argmax when
greedy), record its log-probability in float32, and feed it back one position further.
Once a row has emitted EOS, it writes PAD with mask 0 for the rest of the budget; the EOS
itself is an action and keeps mask 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from rlax_trpo.lm.model import KVCache, ModelConfig, init_cache
from rlax_trpo.lm.tasks import EOS, PAD


class Completion(NamedTuple):
    """Sampled completions.

    Attributes:
      tokens: `[B, C]` int32, PAD after EOS.
      mask: `[B, C]` float32, 1 on generated tokens (EOS included), 0 on padding.
      logprobs: `[B, C]` float32 log pi(token | prefix) at the sampling temperature, 0 on padding.
      lengths: `[B]` int32 number of generated tokens (EOS included).
    """

    tokens: jax.Array
    mask: jax.Array
    logprobs: jax.Array
    lengths: jax.Array


class _Carry(NamedTuple):
    cache: KVCache
    logits: jax.Array  # [B, V] next-token logits
    done: jax.Array  # [B] bool, EOS already emitted
    key: jax.Array


ApplyFn = Callable[..., tuple[jax.Array, KVCache | None]]


def tempered_log_softmax(logits: jax.Array, temperature: float | jax.Array) -> jax.Array:
    """log softmax(logits / temperature) in float32, `[..., V]`."""
    return jax.nn.log_softmax(logits.astype(jnp.float32) / temperature, axis=-1)


def sample(
    apply_fn: ApplyFn,
    params,
    config: ModelConfig,
    prompts: jax.Array,
    key: jax.Array,
    max_new_tokens: int,
    temperature: float | jax.Array = 1.0,
    greedy: bool = False,
) -> Completion:
    """Sample one completion per prompt.

    Args:
      apply_fn: `model.apply`, `(params, tokens, start, cache) -> (logits, cache)`.
      params: model parameters.
      config: the model's config (for the cache shape).
      prompts: `[B, P]` int32, all of length P; `P + max_new_tokens <= config.max_len`.
      key: typed PRNG key.
      max_new_tokens: static completion budget C.
      temperature: sampling temperature (traced); ignored when `greedy` (static).

    Returns:
      A `Completion` with `[B, C]` fields.
    """
    chex.assert_rank(prompts, 2)
    batch, prompt_len = prompts.shape
    if prompt_len + max_new_tokens > config.max_len:
        raise ValueError(f"{prompt_len}+{max_new_tokens} tokens exceed max_len {config.max_len}")
    logits, cache = apply_fn(params, prompts, 0, init_cache(config, batch))

    def step(carry: _Carry, t):
        key, sub = jax.random.split(carry.key)
        logp_all = tempered_log_softmax(carry.logits, temperature)
        if greedy:
            token = jnp.argmax(carry.logits, axis=-1)
        else:
            token = jax.random.categorical(sub, logp_all, axis=-1)
        logp = jnp.take_along_axis(logp_all, token[:, None], axis=-1)[:, 0]
        alive = ~carry.done
        token = jnp.where(alive, token, PAD).astype(jnp.int32)
        logits, cache = apply_fn(params, token[:, None], prompt_len + t, carry.cache)
        new = _Carry(cache, logits[:, -1], carry.done | (token == EOS), key)
        return new, (token, alive.astype(jnp.float32), jnp.where(alive, logp, 0.0))

    init = _Carry(cache, logits[:, -1], jnp.zeros(batch, bool), key)
    _, (tokens, mask, logprobs) = jax.lax.scan(step, init, jnp.arange(max_new_tokens))
    tokens, mask, logprobs = tokens.T, mask.T, logprobs.T
    return Completion(tokens, mask, logprobs, mask.sum(1).astype(jnp.int32))


def completion_logits(
    apply_fn: ApplyFn, params, prompts: jax.Array, completions: jax.Array
) -> jax.Array:
    """Full forward pass over prompt + completion; the logits predicting each completion token.

    Returns:
      `[B, C, V]` float32, row t predicting `completions[:, t]` from the prefix before it.
    """
    chex.assert_rank([prompts, completions], 2)
    seq = jnp.concatenate([prompts, completions], axis=1)
    logits, _ = apply_fn(params, seq[:, :-1])
    return logits[:, prompts.shape[1] - 1 :]


def token_logprobs(
    logits: jax.Array, tokens: jax.Array, temperature: float | jax.Array = 1.0
) -> tuple[jax.Array, jax.Array]:
    """log pi(token) and the entropy of pi at each position, pi = softmax(logits / T).

    Args:
      logits: `[B, C, V]`; tokens: `[B, C]`.

    Returns:
      (logprobs `[B, C]`, entropy `[B, C]`), float32.
    """
    chex.assert_rank([logits, tokens], [3, 2])
    logp_all = tempered_log_softmax(logits, temperature)
    logp = jnp.take_along_axis(logp_all, tokens[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    return logp, entropy
