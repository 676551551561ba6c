"""DPPO's divergence-masked losses (`loss_type: dppo_tv | dppo_kl`) on hand-worked cases.

Closed forms of arXiv:2602.04879 as verl 0.9.1 writes them (tests/test_lm_losses_verl.py checks
the same losses against verl's own function where verl is installed): with p = pi(y),
q = pi_old(y), r = p / q, the per-token loss is -sg(min(r, C)) A log p m, m the mask, so its
value is -A r log p and its gradient with respect to log p is -A r on kept tokens, 0 on masked
ones; aggregated by the whole batch's token mean.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.config import Config
from rlax_trpo.errors import ConfigError
from rlax_trpo.lm.objectives import policy_loss
from rlax_trpo.lm.types import LMBatch, LMHParams

# four tokens, pi_old(y) = 0.5 each: A > 0 with p far above q (leaves the region: masked),
# A > 0 with p just above q (kept), A < 0 with p far below q (masked), A < 0 with p above q
# (moving back: kept)
P = np.array([[0.90, 0.52, 0.10, 0.70]])
Q = np.full_like(P, 0.5)
ADV = np.array([1.0, 1.0, -1.0, -1.0])


def loss_and_grad(loss_type: str, p, q, adv, **hparams):
    """policy_loss of one sequence per token (so each token has its own advantage), float64;
    every sequence has a second, padded, token, which must get no gradient."""
    with jax.enable_x64(True):
        n = adv.shape[0]
        pad = lambda x: jnp.concatenate(
            [jnp.log(jnp.asarray(x).reshape(n, 1)), -jnp.ones((n, 1))], 1
        )
        logp = pad(p)
        batch = LMBatch(
            prompts=jnp.zeros((n, 1), jnp.int32),
            tokens=jnp.zeros((n, 2), jnp.int32),
            mask=jnp.asarray([[1.0, 0.0]] * n),
            advantages=jnp.asarray(adv),
            seq_weight=jnp.ones(n),
            old_logprobs=pad(q),
            ref_logprobs=logp,
        )
        cfg = Config.create(algorithm="grpo_lm", max_new_tokens=2, loss_type=loss_type)
        hp = LMHParams(kl_beta=0.0, **hparams)
        fn = jax.value_and_grad(lambda lp: policy_loss(lp, batch, hp, cfg.grpo_cfg()), has_aux=True)
        (loss, aux), grad = fn(logp)
        assert np.all(np.asarray(grad)[:, 1] == 0.0)
        return float(loss), np.asarray(grad)[:, 0], {k: float(v) for k, v in aux.items()}


def expected(p, q, adv, kept, cap=20.0):
    """The closed form: token-mean of -min(r, C) A log p over kept tokens, its gradient."""
    w = np.minimum(p / q, cap)
    n = adv.shape[0]
    return -np.sum(w * adv * np.log(p) * kept) / n, -w * adv * kept / n


@pytest.mark.parametrize(
    "loss_type, hparams",
    [("dppo_tv", {"dppo_tv_low": 0.2, "dppo_tv_high": 0.2}), ("dppo_kl", {})],
)
def test_the_mask_keeps_the_tokens_inside_the_region(loss_type, hparams):
    # binary KL(0.5 || 0.9) = KL(0.5 || 0.1) = 0.511 > 0.05; KL(0.5 || 0.52) = 8e-4
    kept = np.array([0.0, 1.0, 0.0, 1.0])
    loss, grad, aux = loss_and_grad(loss_type, P.ravel(), Q.ravel(), ADV, **hparams)
    want_loss, want_grad = expected(P.ravel(), Q.ravel(), ADV, kept)
    assert loss == pytest.approx(want_loss, abs=1e-12)
    np.testing.assert_allclose(grad, want_grad, atol=1e-12)
    assert aux["grpo/dppo_mask_frac"] == pytest.approx(0.5)


def test_tv_thresholds_are_one_sided_by_the_advantage():
    # p - q = 0.1: A > 0 kept by high = 0.15, masked by high = 0.05; low does not matter
    p, q = np.array([0.6, 0.6]), np.array([0.5, 0.5])
    adv = np.array([1.0, 1.0])
    _, grad_in, _ = loss_and_grad("dppo_tv", p, q, adv, dppo_tv_high=0.15, dppo_tv_low=0.0)
    _, grad_out, _ = loss_and_grad("dppo_tv", p, q, adv, dppo_tv_high=0.05, dppo_tv_low=1.0)
    np.testing.assert_allclose(grad_in, -1.2 / 2 * np.ones(2), atol=1e-12)
    np.testing.assert_allclose(grad_out, 0.0, atol=1e-15)
    # the same move with A < 0 is towards lower loss only if p falls: p rose, so it is kept
    _, grad_neg, _ = loss_and_grad("dppo_tv", p, q, -adv, dppo_tv_high=0.0, dppo_tv_low=0.0)
    np.testing.assert_allclose(grad_neg, 1.2 / 2 * np.ones(2), atol=1e-12)


def test_kl_low_threshold_masks_a_negative_advantage_that_fell_too_far():
    # KL(0.5 || 0.3) = 0.5 ln(5/3) + 0.5 ln(5/7) = 0.0872: masked by low 0.05, kept by low 0.1
    p, q, adv = np.array([0.3]), np.array([0.5]), np.array([-1.0])
    binary_kl = 0.5 * math.log(0.5 / 0.3) + 0.5 * math.log(0.5 / 0.7)
    assert 0.05 < binary_kl < 0.1
    _, masked, _ = loss_and_grad("dppo_kl", p, q, adv, dppo_kl_low=0.05, dppo_kl_high=1.0)
    _, kept, _ = loss_and_grad("dppo_kl", p, q, adv, dppo_kl_low=0.1, dppo_kl_high=0.0)
    assert masked[0] == 0.0
    assert kept[0] == pytest.approx(0.6, abs=1e-12)  # -A r = 0.3 / 0.5


def test_the_importance_weight_is_truncated_at_the_cap():
    # r = 0.9 / 0.05 = 18, kept (A < 0 and p rose); a cap of 4 weights the token by 4, not 18
    p, q, adv = np.array([0.9]), np.array([0.05]), np.array([-1.0])
    _, grad, _ = loss_and_grad("dppo_tv", p, q, adv, dppo_ratio_cap=4.0)
    _, grad_free, _ = loss_and_grad("dppo_tv", p, q, adv)
    assert grad[0] == pytest.approx(4.0, abs=1e-12)
    assert grad_free[0] == pytest.approx(18.0, abs=1e-9)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["loss_type=grpo", "hp.dppo_tv_low=0.1"], "hp.dppo_tv_low"),
        (["loss_type=dppo_tv", "hp.dppo_kl_high=0.1"], "hp.dppo_kl_high"),
        (["loss_type=dppo_kl", "hp.dppo_tv_high=0.1"], "hp.dppo_tv_high"),
        (["loss_type=cispo", "hp.dppo_ratio_cap=5"], "hp.dppo_ratio_cap"),
        (["loss_type=dppo_tv", "hp.dppo_tv_low=-0.1"], "hp.dppo_tv_low"),
    ],
)
def test_thresholds_read_only_with_their_loss(overrides, field):
    from rlax_trpo.config import load_config

    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config("grpo_lm_max_digit", overrides)
