"""KV-cache sampler: its log-probs equal a full forward pass; EOS masking."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.lm import tasks
from rlax_trpo.lm.model import ModelConfig, Transformer, init_cache, init_params
from rlax_trpo.lm.sampling import completion_logits, sample, token_logprobs

CFG = ModelConfig(vocab_size=tasks.VOCAB_SIZE, max_len=12, num_layers=2, d_model=16, num_heads=2)
MODEL = Transformer(CFG)
# one compiled sampler for every temperature (it is traced), one for greedy decoding
_sample = jax.jit(lambda p, x, k, t: sample(MODEL.apply, p, init_cache(CFG, len(x)), x, k, 7, t))
_greedy = jax.jit(
    lambda p, x: sample(
        MODEL.apply, p, init_cache(CFG, len(x)), x, jax.random.key(0), 7, greedy=True
    )
)
_logits = jax.jit(lambda p, x, c: completion_logits(MODEL.apply, p, x, c))


@pytest.fixture(scope="module")
def setup():
    params = jax.jit(lambda k: init_params(MODEL, k))(jax.random.key(0))
    prompts, _ = tasks.sort_task(4).generate(jax.random.key(1), 16)
    return MODEL, params, prompts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_kv_cache_logprobs_equal_full_forward(setup, temperature):
    _, params, prompts = setup
    c = _sample(params, prompts, jax.random.key(2), temperature)
    logp, _ = token_logprobs(_logits(params, prompts, c.tokens), c.tokens, temperature)
    np.testing.assert_allclose(c.logprobs, logp * c.mask, atol=2e-5)
    assert float(c.mask.sum()) > 16  # something was generated


def test_greedy_is_argmax_of_full_forward(setup):
    _, params, prompts = setup
    c = _greedy(params, prompts)
    argmax = jnp.argmax(_logits(params, prompts, c.tokens), -1)
    np.testing.assert_array_equal(jnp.where(c.mask > 0, argmax, tasks.PAD), c.tokens)


def test_eos_masks_the_rest(setup):
    _, params, prompts = setup
    c = _sample(params, prompts, jax.random.key(3), 2.0)  # hot: EOS shows up early somewhere
    tokens, mask = np.asarray(c.tokens), np.asarray(c.mask)
    for row, m in zip(tokens, mask, strict=True):
        eos = np.flatnonzero(row == tasks.EOS)
        n = eos[0] + 1 if eos.size else len(row)
        assert m[:n].all() and not m[n:].any()
        assert (row[n:] == tasks.PAD).all()
    np.testing.assert_array_equal(c.lengths, mask.sum(1))
    assert (tokens == tasks.EOS).any(), "high temperature should emit EOS somewhere"
