"""Autoregressive sampling with a KV cache inside `lax.scan`, and full-forward scoring.

The sampler prefills the cache with the prompt in one forward pass, then runs a scan of
`max_new_tokens` steps: sample a token from `softmax(logits / temperature)` (or argmax when
greedy), record its log-probability in float32, and feed it back one position further.
Once a row has emitted one of its end ids (EOS), it writes PAD with mask 0 for the rest of the
budget; the EOS itself is an action and keeps mask 1. Prompts may be left-padded (`pad`: the
padding slots of each row), so prompts of different lengths share one batch.

Scoring a completion by a full forward pass either gives `[B, C, V]` logits at once
(`completion_logits`, for small vocabularies) or, for a large vocabulary, log-probs and
entropies a chunk of positions at a time from the final hidden states (`chunked_logprobs`),
so that `[B, C, V]` float32 logits never exist at once, in the forward or the backward pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from rlax_trpo.lm.model import KVCache
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
    """log softmax(logits / temperature) in float32 (float64 logits stay float64), `[..., V]`."""
    wide = jnp.promote_types(jnp.float32, logits.dtype)
    return jax.nn.log_softmax(logits.astype(wide) / temperature, axis=-1)


def sample(
    apply_fn: ApplyFn,
    params,
    cache: KVCache,
    prompts: jax.Array,
    key: jax.Array,
    max_new_tokens: int,
    temperature: float | jax.Array = 1.0,
    greedy: bool = False,
    pad: jax.Array | None = None,
    eos_ids: tuple[int, ...] = (EOS,),
    pad_id: int = PAD,
) -> Completion:
    """Sample one completion per prompt.

    Args:
      apply_fn: `model.apply`, `(params, tokens, start, cache, pad) -> (logits, cache)`.
      params: model parameters.
      cache: an empty KV cache of at least `P + max_new_tokens` slots for the B rows
        (`init_cache`).
      prompts: `[B, P]` int32, left-padded: row b's first `pad[b]` tokens are padding.
      key: typed PRNG key.
      max_new_tokens: static completion budget C.
      temperature: sampling temperature (traced); ignored when `greedy` (static).
      pad: `[B]` int32 left-padding counts (None: no padding).
      eos_ids: the ids that end a completion (static; a model may have several).
      pad_id: the id written after a row's end.

    Returns:
      A `Completion` with `[B, C]` fields.
    """
    chex.assert_rank(prompts, 2)
    batch, prompt_len = prompts.shape
    if prompt_len + max_new_tokens > cache.k.shape[2]:
        raise ValueError(
            f"{prompt_len}+{max_new_tokens} tokens exceed the cache's {cache.k.shape[2]} slots"
        )
    logits, cache = apply_fn(params, prompts, 0, cache, pad)
    eos = jnp.asarray(eos_ids, jnp.int32)

    def step(carry: _Carry, t):
        key, sub = jax.random.split(carry.key)
        logp_all = tempered_log_softmax(carry.logits, temperature)
        if greedy:
            token = jnp.argmax(carry.logits, axis=-1)
        else:
            token = jax.random.categorical(sub, logp_all, axis=-1)
        logp = jnp.take_along_axis(logp_all, token[:, None], axis=-1)[:, 0]
        alive = ~carry.done
        token = jnp.where(alive, token, pad_id).astype(jnp.int32)
        logits, cache = apply_fn(params, token[:, None], prompt_len + t, carry.cache, pad)
        ended = carry.done | (alive & jnp.isin(token, eos))
        new = _Carry(cache, logits[:, -1], ended, key)
        return new, (token, alive.astype(jnp.float32), jnp.where(alive, logp, 0.0))

    init = _Carry(cache, logits[:, -1], jnp.zeros(batch, bool), key)
    _, (tokens, mask, logprobs) = jax.lax.scan(step, init, jnp.arange(max_new_tokens))
    tokens, mask, logprobs = tokens.T, mask.T, logprobs.T
    return Completion(tokens, mask, logprobs, mask.sum(1).astype(jnp.int32))


def completion_logits(
    apply_fn: ApplyFn, params, prompts: jax.Array, completions: jax.Array, pad=None
) -> jax.Array:
    """Full forward pass over prompt + completion; the logits predicting each completion token.

    Args:
      prompts: `[B, P]`, left-padded by `pad` `[B]` (None: not padded); completions `[B, C]`.

    Returns:
      `[B, C, V]` float32, row t predicting `completions[:, t]` from the prefix before it.
    """
    chex.assert_rank([prompts, completions], 2)
    seq = jnp.concatenate([prompts, completions], axis=1)
    logits, _ = apply_fn(params, seq[:, :-1], 0, None, pad)
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


def chunked_logprobs(
    head_fn: Callable[[jax.Array], jax.Array],
    hidden: jax.Array,
    tokens: jax.Array,
    temperature: float | jax.Array = 1.0,
    chunk: int = 64,
) -> tuple[jax.Array, jax.Array]:
    """`token_logprobs` of `head_fn(hidden)` computed `chunk` positions at a time.

    Each chunk's `[B, chunk, V]` logits are made, reduced to log-probs and entropies, and
    dropped; `jax.checkpoint` makes the backward pass recompute them chunk by chunk too, so the
    peak is one chunk's logits, not the `[B, C, V]` of the whole completion.

    Args:
      head_fn: final hidden states `[B, c, H]` -> float32 logits `[B, c, V]` (closing over
        the head's parameters, which are differentiated through it).
      hidden: `[B, C, H]` hidden states predicting `tokens` `[B, C]`.

    Returns:
      (logprobs `[B, C]`, entropy `[B, C]`), float32.
    """
    chex.assert_rank([hidden, tokens], [3, 2])
    length = tokens.shape[1]
    chunk = max(1, min(chunk, length))
    n = -(-length // chunk)
    extra = n * chunk - length
    hidden = jnp.pad(hidden, ((0, 0), (0, extra), (0, 0)))
    tokens = jnp.pad(tokens, ((0, 0), (0, extra)))
    split = lambda x: jnp.moveaxis(x.reshape(x.shape[0], n, chunk, *x.shape[2:]), 1, 0)

    @jax.checkpoint
    def one(args):
        h, t = args
        return token_logprobs(head_fn(h), t, temperature)

    logp, entropy = jax.lax.map(one, (split(hidden), split(tokens)))
    merge = lambda x: jnp.moveaxis(x, 0, 1).reshape(x.shape[1], n * chunk)[:, :length]
    return merge(logp), merge(entropy)
