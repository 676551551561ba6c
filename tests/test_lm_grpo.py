"""GRPO loss pieces worked out by hand, masking of padding, ratio 1 on the first epoch, and the
loss types' identities that need no TRL (tests/test_lm_losses_trl.py compares them with TRL)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import losses
from rlax_trpo.config import Config, load_config
from rlax_trpo.config import config_from_dict as validate
from rlax_trpo.errors import ConfigError
from rlax_trpo.lm import tasks
from rlax_trpo.lm.config import GRPOLMFields
from rlax_trpo.lm.grpo import grpo_loss, make_grpo
from rlax_trpo.lm.model import ModelConfig, Transformer, init_params
from rlax_trpo.lm.objectives import LOSS_TYPES, aggregate_loss, importance_ratio, policy_loss
from rlax_trpo.lm.types import LMBatch, LMGRPOConfig, LMHParams
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
    # batch_token_mean (DAPO): (a+b+c+d) / the whole batch's tokens per minibatch, e.g. 7;
    # without that count, this batch's own: token_mean
    norm = jnp.full(2, 7.0)
    assert float(aggregate_loss(PER_TOKEN, MASK, ONES, "batch_token_mean", 3, norm)) == 2.0
    assert float(aggregate_loss(PER_TOKEN, MASK, ONES, "batch_token_mean", 3)) == 3.5
    # seq_mean_token_sum (LUSPO): (a + (b+c+d)) / 2 = 7
    assert float(aggregate_loss(PER_TOKEN, MASK, ONES, "seq_mean_token_sum", 3)) == 7.0


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
    assert float(aggregate_loss(PER_TOKEN, MASK, w, "batch_token_mean", 3)) == pytest.approx(4)
    # the whole batch's count (3 weighted tokens) comes from make_batch, the numerator is b+c+d
    norm = jnp.full(2, 3.0)
    assert float(aggregate_loss(PER_TOKEN, MASK, w, "batch_token_mean", 3, norm)) == 4.0
    assert float(aggregate_loss(PER_TOKEN, MASK, w, "seq_mean_token_sum", 3)) == 12.0


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
SMALL = {"num_prompts": 4, "group_size": 4, "max_new_tokens": 3, "num_epochs": 2}


def grpo_cfg(**fields):
    """The static settings of a validated `grpo_lm` configuration on TASK: the defaults and
    checks of the YAML path, `fields` changed."""
    fields = {"algorithm": "grpo_lm", "task": "max_digit", "num_digits": 3, **fields}
    return validate(fields).grpo_cfg()


GCFG = grpo_cfg(**SMALL, num_minibatches=2)


def _batch(params, key):
    """A batch with padding: sequence i has i % 3 + 1 real tokens."""
    b, c = 8, 3
    prompts, _ = TASK.generate(key, b)
    tokens = jax.random.randint(key, (b, c), 2, 12)
    lengths = jnp.arange(b) % 3 + 1
    mask = (jnp.arange(c)[None] < lengths[:, None]).astype(jnp.float32)
    tokens = jnp.where(mask > 0, tokens, tasks.PAD)
    k1, k2, k3 = jax.random.split(key, 3)
    return LMBatch(
        prompts,
        tokens,
        mask,
        advantages=jax.random.normal(k1, (b,)),
        seq_weight=jnp.ones(b),
        old_logprobs=-jax.random.uniform(k2, (b, c), minval=0.5, maxval=3),
        ref_logprobs=-jax.random.uniform(k3, (b, c), minval=0.5, maxval=3),
    )


PADDING_CASES = [
    {"loss_agg": "seq_mean_token_mean"},
    {"loss_agg": "token_mean"},
    {"loss_agg": "constant"},
    {"loss_type": "vespo", "kl_bias_correction": True, "importance_sampling_level": "sequence"},
]


@pytest.mark.parametrize("fields", PADDING_CASES, ids=lambda f: "-".join(map(str, f.values())))
def test_padding_contributes_nothing_to_loss_or_kl(fields):
    model = Transformer(MCFG)
    params = init_params(model, jax.random.key(0))
    batch = _batch(params, jax.random.key(1))
    cfg = grpo_cfg(**SMALL, num_minibatches=2, **fields)
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
    cfg = grpo_cfg(
        **SMALL, num_minibatches=2, ref_refresh_every=1, mask_zero_std=True, loss_agg="token_mean"
    )
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
    with pytest.raises(ConfigError, match=r"^loss_type: .*'grpo'.*'vespo'.*\(got 'ppo'\)"):
        validate({**base, "loss_type": "ppo"})
    with pytest.raises(ConfigError, match=r"^importance_sampling_level: "):
        validate({**base, "importance_sampling_level": "seq"})
    with pytest.raises(ConfigError, match=r"^hp.clip_delta: "):
        validate({**base, "hp": {"clip_delta": -1.0}})
    # an explicit loss_agg overrides the loss type's own; None leaves it
    assert validate({**base, "loss_type": "dapo", "loss_agg": "constant"}).grpo_cfg().loss_agg == (
        "constant"
    )
    assert validate({**base, "loss_type": "dapo"}).grpo_cfg().loss_agg is None
    with pytest.raises(ConfigError, match="num_minibatches"):
        validate({**base, "num_prompts": 3, "group_size": 3, "num_minibatches": 2})
    with pytest.raises(ConfigError, match="^bogus: unknown key"):
        validate({**base, "bogus": 1})
    with pytest.raises(ConfigError, match="^num_envs: not read by algorithm grpo_lm; read by"):
        validate({**base, "num_envs": 4})
    cfg = validate({**base, "group_size": 4})
    assert cfg.completion_len() == 5 and cfg.grpo_cfg().group_size == 4


def test_the_settings_have_one_source_of_defaults_and_checks():
    """`LMGRPOConfig` is a view of the validated fields: none of its own defaults, the fields
    of `GRPOLMFields` and the completion budget; Python gets the YAML path's defaults."""
    assert LMGRPOConfig._field_defaults == {}
    assert set(LMGRPOConfig._fields) == {*GRPOLMFields.model_fields, "max_new_tokens"}
    cfg = Config.create(algorithm="grpo_lm", task="sort").grpo_cfg()
    defaults = {name: field.default for name, field in GRPOLMFields.model_fields.items()}
    assert cfg._asdict() == {**defaults, "max_new_tokens": 5}


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


# ------------------------------------------------------------- the loss types (no TRL needed)


def _loss_inputs(seed=0, b=8, c=5, spread=0.4):
    """Per-token log-probs and a batch around them: ragged lengths 1..c, old log-probs a
    noisy distance away (ratios on both sides of the clip range), advantages of both signs."""
    k = jax.random.split(jax.random.key(seed), 5)
    lengths = jnp.arange(b) % c + 1
    mask = (jnp.arange(c)[None] < lengths[:, None]).astype(jnp.float32)
    logp = -jax.random.uniform(k[0], (b, c), minval=0.2, maxval=3.0)
    batch = LMBatch(
        prompts=jnp.zeros((b, 1), jnp.int32),
        tokens=jnp.zeros((b, c), jnp.int32),
        mask=mask,
        advantages=jax.random.normal(k[1], (b,)),
        seq_weight=jnp.ones(b),
        old_logprobs=logp + spread * jax.random.normal(k[2], (b, c)),
        ref_logprobs=logp + spread * jax.random.normal(k[3], (b, c)),
    )
    return logp, batch


def _old_loss(logp, batch, hp, cfg):
    """The loss as it was before the loss types: token ratios, PPO's clip, the KL penalty."""
    adv = jnp.broadcast_to(batch.advantages[:, None], logp.shape)
    ratio = jnp.exp(logp - batch.old_logprobs)
    objective = losses.clipped_surrogate(ratio, adv, hp.clip_eps_low, hp.clip_eps_high)
    kl = losses.kl_estimate(batch.ref_logprobs - logp, cfg.kl_estimator)
    per_token = -objective + hp.kl_beta * kl
    agg = cfg.loss_agg or "seq_mean_token_mean"
    return aggregate_loss(per_token, batch.mask, batch.seq_weight, agg, cfg.max_new_tokens)


@pytest.mark.parametrize("loss_agg", [None, "seq_mean_token_mean", "token_mean", "constant"])
def test_the_default_loss_type_is_the_old_loss_bit_for_bit(loss_agg):
    logp, batch = _loss_inputs()
    hp, cfg = LMHParams(kl_beta=0.3), grpo_cfg(max_new_tokens=5, loss_agg=loss_agg)
    assert cfg.loss_type == "grpo" and cfg.importance_sampling_level == "token"
    new = jax.value_and_grad(lambda lp: policy_loss(lp, batch, hp, cfg)[0])(logp)
    old = jax.value_and_grad(lambda lp: _old_loss(lp, batch, hp, cfg))(logp)
    assert float(new[0]) == float(old[0])
    np.testing.assert_array_equal(new[1], old[1])
    # the bundled configs: the default loss type with the aggregation they always had
    for name in ("grpo_lm_max_digit", "grpo_lm_sort", "grpo_lm_add"):
        gcfg = load_config(name).grpo_cfg()
        assert (gcfg.loss_type, gcfg.importance_sampling_level) == ("grpo", "token")
        assert gcfg.loss_agg in (None, LOSS_TYPES["grpo"]) and not gcfg.kl_bias_correction


def _seq_ratio(logp, batch):
    """GSPO's s_i = exp(mean over the sequence's tokens of log r_it), by hand."""
    log_r = np.where(batch.mask > 0, np.asarray(logp - batch.old_logprobs), 0.0)
    return np.exp(log_r.sum(1) / np.asarray(batch.mask).sum(1))


def test_gspo_ratio_is_one_value_per_sequence_and_clipped_per_sequence():
    logp, batch = _loss_inputs()
    s = _seq_ratio(logp, batch)
    ratio = importance_ratio(logp, batch.old_logprobs, batch.mask, "sequence")
    np.testing.assert_allclose(ratio, np.broadcast_to(s[:, None], logp.shape), rtol=1e-6)
    # the loss (grpo aggregation, beta 0): -mean_i min(s_i A_i, clip(s_i) A_i), and its
    # gradient -s_i A_i / (B |o_i|) on every token of an unclipped sequence, 0 on a clipped one
    hp = LMHParams(kl_beta=0.0, clip_eps_low=0.2, clip_eps_high=0.28)
    cfg = grpo_cfg(max_new_tokens=5, importance_sampling_level="sequence")
    adv = np.asarray(batch.advantages)
    clipped = ((adv > 0) & (s > 1.28)) | ((adv < 0) & (s < 0.8))
    assert clipped.any() and not clipped.all()
    expected = -np.mean(np.minimum(s * adv, np.clip(s, 0.8, 1.28) * adv))
    loss, grad = jax.value_and_grad(lambda lp: policy_loss(lp, batch, hp, cfg)[0])(logp)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    lengths = np.asarray(batch.mask).sum(1)
    per_seq = np.where(clipped, 0.0, -s * adv / (len(s) * lengths))
    np.testing.assert_allclose(grad, per_seq[:, None] * batch.mask, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_cispo_weight_carries_no_gradient(level):
    """d loss / d log pi_it = -sg(min(r, 1 + eps_high)) A_i / (the batch's token count)."""
    logp, batch = _loss_inputs()
    hp = LMHParams(kl_beta=0.0, clip_eps_high=0.28)
    cfg = grpo_cfg(max_new_tokens=5, loss_type="cispo", importance_sampling_level=level)
    r = importance_ratio(logp, batch.old_logprobs, batch.mask, level)
    truncated = np.asarray(r > 1.28)[np.asarray(batch.mask) > 0]
    assert truncated.any() and not truncated.all()
    grad = jax.grad(lambda lp: policy_loss(lp, batch, hp, cfg)[0])(logp)
    w = jnp.minimum(r, 1.28)
    expected = -w * batch.advantages[:, None] * batch.mask / batch.mask.sum()
    np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("loss_agg", [None, "token_mean", "seq_mean_token_sum"])
def test_gspo_token_is_gspo_in_value_and_in_gradient(loss_agg):
    """GSPO-token s_it = sg[s_i] pi_it / sg[pi_it]: the value of s_i, and with one advantage
    per sequence the gradient of GSPO: -c_i s_i A_i on the tokens of an unclipped sequence,
    with c_i the aggregation's weight of a token of sequence i (the same for all of them)."""
    logp, batch = _loss_inputs(seed=1)
    hp = LMHParams(kl_beta=0.0)
    cfg = grpo_cfg(max_new_tokens=5, loss_agg=loss_agg)
    seq_cfg = grpo_cfg(max_new_tokens=5, loss_agg=loss_agg, importance_sampling_level="sequence")
    tok_cfg = grpo_cfg(
        max_new_tokens=5, loss_agg=loss_agg, importance_sampling_level="sequence_token"
    )
    s_it = importance_ratio(logp, batch.old_logprobs, batch.mask, "sequence_token")
    s_i = importance_ratio(logp, batch.old_logprobs, batch.mask, "sequence")
    np.testing.assert_allclose(s_it, s_i, rtol=1e-6)
    seq = jax.value_and_grad(lambda lp: policy_loss(lp, batch, hp, seq_cfg)[0])(logp)
    tok = jax.value_and_grad(lambda lp: policy_loss(lp, batch, hp, tok_cfg)[0])(logp)
    assert float(tok[0]) == pytest.approx(float(seq[0]), rel=1e-6)
    np.testing.assert_allclose(tok[1], seq[1], rtol=1e-5, atol=1e-8)
    # the closed form: c_i = d aggregate / d l_it
    agg = cfg.loss_agg or LOSS_TYPES["grpo"]
    c = jax.grad(lambda x: aggregate_loss(x, batch.mask, batch.seq_weight, agg, 5))(logp)
    s, adv = _seq_ratio(logp, batch), np.asarray(batch.advantages)
    clipped = ((adv > 0) & (s > 1.28)) | ((adv < 0) & (s < 0.8))
    assert clipped.any() and not clipped.all()
    expected = np.where(clipped[:, None], 0.0, -c * (s * adv)[:, None])
    np.testing.assert_allclose(tok[1], expected, rtol=1e-5, atol=1e-8)
    # KL and its bias correction: the same value too
    kl_hp = LMHParams(kl_beta=0.3)
    corr = [
        grpo_cfg(
            max_new_tokens=5,
            loss_agg=loss_agg,
            importance_sampling_level=level,
            kl_bias_correction=True,
        )
        for level in ("sequence", "sequence_token")
    ]
    values = [float(policy_loss(logp, batch, kl_hp, c_)[0]) for c_ in corr]
    assert values[1] == pytest.approx(values[0], rel=1e-6)


def test_a_short_run_of_another_loss_type_stays_finite():
    """Two iterations of a `grpo_lm` configuration with CISPO on GSPO's sequence ratio, the
    bias-corrected KL and two minibatches (the batch-token normaliser): finite throughout."""
    config = validate(
        {
            "algorithm": "grpo_lm",
            "task": "max_digit",
            "num_digits": 3,
            "model": {"num_layers": 1, "d_model": 16, "num_heads": 2},
            "num_prompts": 4,
            "group_size": 4,
            "num_minibatches": 2,
            "loss_type": "cispo",
            "importance_sampling_level": "sequence",
            "kl_bias_correction": True,
            "hp": {"learning_rate": 1e-2, "partial_credit": 0.5, "kl_beta": 0.1},
        }
    )
    grpo = make_grpo(config.model_cfg(), config.make_task(), config.grpo_cfg())
    params = init_params(Transformer(config.model_cfg()), jax.random.key(0))
    state = grpo.init(jax.random.key(1), params, config.hp)
    step = jax.jit(grpo.iteration)
    for _ in range(2):
        state, m = step(state, config.hp)
        assert all(np.isfinite(float(v)) for v in m.values()), m
    assert "grpo/cispo_trunc_frac" in m and float(m["grpo/ratio_first"]) == pytest.approx(1.0)
    assert float(m["grpo/zero_std_frac"]) < 1.0  # some groups had a gradient
    assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(state.params))
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), params, state.params)
    assert any(jax.tree.leaves(changed))
