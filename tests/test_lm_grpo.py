"""GRPO loss pieces worked out by hand, masking of padding, ratio 1 on the first epoch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.config import config_from_dict as validate
from rlax_trpo.errors import ConfigError
from rlax_trpo.lm import tasks
from rlax_trpo.lm.grpo import (
    Batch,
    GRPOConfig,
    LMHParams,
    aggregate_loss,
    grpo_loss,
    make_grpo,
)
from rlax_trpo.lm.model import ModelConfig, Transformer, init_params
from rlax_trpo.losses import kl_estimate as _kl


def kl_estimate(logp, ref_logp, kind):
    """KL(pi || pi_ref) per token from tokens sampled by pi, as the LM loss uses it."""
    return _kl(ref_logp - logp, kind)


# Two sequences: lengths 1 and 3 (budget 3); per-token losses a | b c d.
PER_TOKEN = jnp.array([[2.0, 0.0, 0.0], [1.0, 4.0, 7.0]])
MASK = jnp.array([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
ONES = jnp.ones(2)


def test_seq_mean_token_mean_vs_token_mean_by_hand():
    # seq_mean_token_mean: (a/1 + (b+c+d)/3) / 2 = (2 + 4) / 2 = 3
    assert float(aggregate_loss(PER_TOKEN, MASK, ONES, "seq_mean_token_mean", 3)) == pytest.approx(
        3.0
    )
    # token_mean: (a+b+c+d) / 4 = 14 / 4 = 3.5
    assert float(aggregate_loss(PER_TOKEN, MASK, ONES, "token_mean", 3)) == pytest.approx(3.5)
    # constant (Dr. GRPO): (a+b+c+d) / (2 sequences * 3 budget) = 14 / 6
    assert float(aggregate_loss(PER_TOKEN, MASK, ONES, "constant", 3)) == pytest.approx(14 / 6)


def test_length_weighting_of_each_token():
    """d loss / d l_t: 1/(N |o_i|) per token for seq-mean, 1/sum|o| for token-mean."""
    w_seq = jax.grad(lambda x: aggregate_loss(x, MASK, ONES, "seq_mean_token_mean", 3))(PER_TOKEN)
    np.testing.assert_allclose(w_seq, [[1 / 2, 0, 0], [1 / 6, 1 / 6, 1 / 6]], rtol=1e-6)
    w_tok = jax.grad(lambda x: aggregate_loss(x, MASK, ONES, "token_mean", 3))(PER_TOKEN)
    np.testing.assert_allclose(w_tok, [[1 / 4, 0, 0], [1 / 4, 1 / 4, 1 / 4]], rtol=1e-6)
    w_const = jax.grad(lambda x: aggregate_loss(x, MASK, ONES, "constant", 3))(PER_TOKEN)
    np.testing.assert_allclose(w_const, [[1 / 6, 0, 0], [1 / 6, 1 / 6, 1 / 6]], rtol=1e-6)


def test_sequence_weight_drops_sequences_from_the_denominator():
    w = jnp.array([0.0, 1.0])
    assert float(aggregate_loss(PER_TOKEN, MASK, w, "seq_mean_token_mean", 3)) == pytest.approx(4)
    assert float(aggregate_loss(PER_TOKEN, MASK, w, "token_mean", 3)) == pytest.approx(4)
    assert float(aggregate_loss(PER_TOKEN, MASK, w, "constant", 3)) == pytest.approx(4)


def test_kl_estimators_known_values():
    logp, ref = jnp.log(jnp.array([0.5, 0.2])), jnp.log(jnp.array([0.25, 0.4]))
    log_rho = ref - logp  # [log 0.5, log 2]
    np.testing.assert_allclose(kl_estimate(logp, ref, "k1"), -log_rho, rtol=1e-6)
    np.testing.assert_allclose(kl_estimate(logp, ref, "k2"), 0.5 * log_rho**2, rtol=1e-6)
    np.testing.assert_allclose(
        kl_estimate(logp, ref, "k3"), [0.5 - 1 - np.log(0.5), 2 - 1 - np.log(2)], rtol=1e-6
    )
    x = jax.random.normal(jax.random.key(0), (2, 1000)) * 3
    assert bool((kl_estimate(x[0], x[1], "k3") >= 0).all())
    assert float(kl_estimate(x[0], x[0], "k3").max()) == 0.0


# ------------------------------------------------------------- a tiny policy on max_digit

TASK = tasks.max_digit_task(3)
MCFG = ModelConfig(tasks.VOCAB_SIZE, TASK.prompt_len + 3, num_layers=1, d_model=16, num_heads=2)
GCFG = GRPOConfig(num_prompts=4, group_size=4, max_new_tokens=3, num_epochs=2, num_minibatches=2)


def _batch(params, key):
    """A batch with padding: sequence i has i % 3 + 1 real tokens."""
    b, c = 8, 3
    prompts, _ = TASK.generate(key, b)
    tokens = jax.random.randint(key, (b, c), 2, 12)
    lengths = jnp.arange(b) % 3 + 1
    mask = (jnp.arange(c)[None] < lengths[:, None]).astype(jnp.float32)
    tokens = jnp.where(mask > 0, tokens, tasks.PAD)
    k1, k2, k3 = jax.random.split(key, 3)
    return Batch(
        prompts,
        tokens,
        mask,
        advantages=jax.random.normal(k1, (b,)),
        seq_weight=jnp.ones(b),
        old_logprobs=-jax.random.uniform(k2, (b, c), minval=0.5, maxval=3),
        ref_logprobs=-jax.random.uniform(k3, (b, c), minval=0.5, maxval=3),
    )


@pytest.mark.parametrize("loss_agg", ["seq_mean_token_mean", "token_mean", "constant"])
def test_padding_contributes_nothing_to_loss_or_kl(loss_agg):
    model = Transformer(MCFG)
    params = init_params(model, jax.random.key(0))
    batch = _batch(params, jax.random.key(1))
    cfg = GCFG._replace(loss_agg=loss_agg)
    hp = LMHParams(kl_beta=0.5)
    pad = batch.mask == 0
    garbage = batch._replace(
        # what sits at padded positions must not matter: tokens, old and reference log-probs
        tokens=jnp.where(pad, 7, batch.tokens),
        old_logprobs=jnp.where(pad, -50.0, batch.old_logprobs),
        ref_logprobs=jnp.where(pad, 30.0, batch.ref_logprobs),
    )
    fn = jax.jit(
        jax.value_and_grad(lambda p, b: grpo_loss(p, b, hp, cfg, model.apply), has_aux=True)
    )
    (loss, aux), grads = fn(params, batch)
    (loss_g, aux_g), grads_g = fn(params, garbage)
    assert np.isfinite(float(loss_g))
    np.testing.assert_allclose(loss, loss_g, rtol=1e-6)
    np.testing.assert_allclose(aux["policy/kl_ref"], aux_g["policy/kl_ref"], rtol=1e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), grads, grads_g
    )


def test_ratio_is_one_on_first_inner_epoch_and_reference_refresh():
    # partial credit: a random policy's rewards vary within groups, so some groups survive
    # zero-variance masking and the policy moves
    hp = LMHParams(learning_rate=1e-2, kl_beta=0.1, partial_credit=0.5)
    cfg = GCFG._replace(ref_refresh_every=1, mask_zero_std=True, loss_agg="token_mean")
    grpo = make_grpo(MCFG, TASK, cfg)
    params = init_params(Transformer(MCFG), jax.random.key(0))
    state = grpo.init(jax.random.key(1), params, hp)
    new_state, m = jax.jit(grpo.iteration)(state, hp)
    # pi_old is recomputed by a full forward pass at the current parameters: exactly r = 1
    assert float(m["grpo/ratio_first"]) == pytest.approx(1.0, abs=1e-6)
    # the sampler's log-probs and the recomputed ones agree
    assert float(m["policy/sample_logprob_gap"]) < 1e-5
    # later minibatches moved the policy (lr is large): mean ratio over all of them != 1
    assert float(m["grpo/zero_std_frac"]) < 1.0
    assert float(m["policy/kl_new_old_k3"]) > 1e-8
    assert int(new_state.step) == 1
    for k in ("grpo/zero_std_frac", "grpo/clip_frac_low", "grpo/clip_frac_high", "policy/kl_ref"):
        assert np.isfinite(float(m[k])), k
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), params, new_state.params)
    assert any(jax.tree.leaves(changed))
    # ref_refresh_every=1: the reference is the updated policy after every iteration
    same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), new_state.params, new_state.ref_params)
    assert all(jax.tree.leaves(same))


def test_config_errors_are_one_line_and_name_the_key():
    base = {"algorithm": "grpo_lm", "task": "sort"}
    with pytest.raises(ConfigError, match=r"^hp.learning_rate: .*valid number.*'abc'"):
        validate({**base, "hp": {"learning_rate": "abc"}})
    with pytest.raises(ConfigError, match=r"^loss_agg: "):
        validate({**base, "loss_agg": "mean"})
    with pytest.raises(ConfigError, match="num_minibatches"):
        validate({**base, "num_prompts": 3, "group_size": 3, "num_minibatches": 2})
    with pytest.raises(ConfigError, match="^bogus: unknown key"):
        validate({**base, "bogus": 1})
    with pytest.raises(ConfigError, match="^num_envs: not read by algorithm grpo_lm; read by"):
        validate({**base, "num_envs": 4})
    cfg = validate({**base, "group_size": 4})
    assert cfg.completion_len() == 5 and cfg.grpo_cfg().group_size == 4


def test_kl_penalty_pulls_towards_the_reference():
    # Zero advantages: the loss is beta * KL(pi || pi_ref) alone. Its gradient is zero at
    # beta 0, and a step along it at beta > 0 lowers the KL to the reference.
    model = Transformer(MCFG)
    params = init_params(model, jax.random.key(0))
    batch = _batch(params, jax.random.key(1))
    batch = batch._replace(advantages=jnp.zeros_like(batch.advantages))

    def loss(p, beta):
        return grpo_loss(p, batch, LMHParams(kl_beta=beta), GCFG, model.apply)

    zero = jax.grad(lambda p: loss(p, 0.0)[0])(params)
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(zero))
    grads = jax.grad(lambda p: loss(p, 0.5)[0])(params)
    stepped = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
    before, after = loss(params, 0.5)[1]["policy/kl_ref"], loss(stepped, 0.5)[1]["policy/kl_ref"]
    assert float(after) < 0.95 * float(before), (before, after)
