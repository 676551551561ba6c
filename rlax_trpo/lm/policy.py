"""The two kinds of language model as `LMPolicy` records: the tiny transformer of the
generated tasks (`tiny_policy`) and a Hugging Face decoder (`decoder_policy`), with or
without LoRA adapters.

A decoder's parameters are two trees: the frozen `weights` (its checkpoint; `LMShared`, one
copy for the whole population) and the trained `params` (LoRA's adapters, or everything under
full fine-tuning, when `weights` is None). `combine` lays one over the other for `apply`.
Its log-probs are chunked (`chunked_logprobs`): a 151,936-token vocabulary's logits for a
whole batch of completions would not fit.
"""

from __future__ import annotations

from typing import Any

import jax

from rlax_trpo.lm.hf.config import DecoderConfig
from rlax_trpo.lm.hf.model import DecoderLM, init_decoder_cache
from rlax_trpo.lm.model import ModelConfig, Transformer, init_cache
from rlax_trpo.lm.sampling import chunked_logprobs, completion_logits, token_logprobs
from rlax_trpo.lm.tasks import EOS, PAD
from rlax_trpo.lm.types import LMPolicy


def tiny_policy(config: ModelConfig) -> LMPolicy:
    """The tiny transformer: every parameter trains, no frozen weights."""
    model = Transformer(config)

    def logprobs(variables, prompts, pad, completions, temperature):
        logits = completion_logits(model.apply, variables, prompts, completions, pad)
        return token_logprobs(logits, completions, temperature)

    return LMPolicy(
        combine=lambda weights, params: params,
        apply=model.apply,
        logprobs=logprobs,
        init_cache=lambda batch, length: init_cache(config, batch),
        eos_ids=(EOS,),
        pad_id=PAD,
        max_len=config.max_len,
    )


def combine(weights: Any, params: Any) -> Any:
    """The frozen `weights` and trained `params` as one variable tree (a deep merge of
    nested dicts; either may be None)."""
    if weights is None:
        return params
    if params is None:
        return weights
    if not isinstance(weights, dict):
        raise ValueError("a parameter is both frozen and trained")
    out = dict(weights)
    for name, value in params.items():
        out[name] = combine(weights.get(name), value)
    return out


def split_trainable(variables: Any, lora: bool) -> tuple[Any, Any]:
    """(frozen, trained) trees of a decoder's variables: with `lora`, the adapters
    (`lora_a`, `lora_b` leaves) train and the rest is frozen; else everything trains."""
    if not lora:
        return None, variables
    from flax.traverse_util import flatten_dict, unflatten_dict

    flat = flatten_dict(variables)
    is_lora = lambda path: path[-1] in ("lora_a", "lora_b")
    frozen = unflatten_dict({k: v for k, v in flat.items() if not is_lora(k)})
    trained = unflatten_dict({k: v for k, v in flat.items() if is_lora(k)})
    return frozen, trained


def decoder_policy(
    cfg: DecoderConfig,
    eos_ids: tuple[int, ...],
    pad_id: int,
    max_len: int,
    chunk: int = 64,
    frozen: bool = True,
) -> LMPolicy:
    """A Hugging Face decoder as an `LMPolicy` (`max_len`: prompt and completion budget,
    the cache's length). `frozen`: the trained parameters are laid over frozen weights (LoRA);
    else they are the whole model and the weights are not read."""
    model = DecoderLM(cfg)

    def logprobs(variables, prompts, pad, completions, temperature):
        seq = jax.numpy.concatenate([prompts, completions], axis=1)[:, :-1]
        hidden, _ = model.apply(variables, seq, 0, None, pad, method=DecoderLM.hidden)
        hidden = hidden[:, prompts.shape[1] - 1 :]
        head = lambda h: model.apply(variables, h, method=DecoderLM.logits)
        return chunked_logprobs(head, hidden, completions, temperature, chunk)

    return LMPolicy(
        combine=combine if frozen else (lambda weights, params: params),
        apply=model.apply,
        logprobs=logprobs,
        init_cache=lambda batch, length: init_decoder_cache(cfg, batch, length),
        eos_ids=tuple(eos_ids),
        pad_id=pad_id,
        max_len=max_len,
    )


def init_adapters(cfg: DecoderConfig, key: jax.Array) -> Any:
    """Fresh LoRA adapters of `DecoderLM(cfg)` (A Kaiming-uniform, B zero: the model as it
    was). Traced inside a jitted program, only the adapters' initialisation is computed (the
    rest of the random model is dead code the compiler drops)."""
    return split_trainable(
        DecoderLM(cfg).init(key, jax.numpy.zeros((1, 1), jax.numpy.int32)), True
    )[1]
