"""The GRPO loss family of the language-model GRPO, as pure functions of per-token log-probs.

`policy_loss(logp, batch, hp, cfg)` is what `rlax_trpo.lm.grpo` differentiates: the per-token
objective of `cfg.loss_type` on the importance ratio of `cfg.importance_sampling_level`, the KL
penalty to the reference policy, and the aggregation over tokens and sequences
(`aggregate_loss`). Every loss type of TRL 1.16 (grpo, dr_grpo, dapo, bnpo, cispo, sapo, luspo,
vespo) and GSPO's sequence ratio are checked number for number against TRL's own
`GRPOTrainer._compute_loss` in tests/test_lm_losses_trl.py.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp

from rlax_trpo import losses
from rlax_trpo.lm.types import LMBatch, LMGRPOConfig, LMHParams
from rlax_trpo.losses import masked_mean

LOSS_AGGREGATIONS = (
    "seq_mean_token_mean",
    "token_mean",
    "batch_token_mean",
    "constant",
    "seq_mean_token_sum",
)
KL_ESTIMATORS = ("k1", "k2", "k3")
# loss type -> its own aggregation (TRL 1.16's `_compute_loss`)
LOSS_TYPES = {
    "grpo": "seq_mean_token_mean",
    "dr_grpo": "constant",
    "dapo": "batch_token_mean",
    "bnpo": "token_mean",
    "cispo": "batch_token_mean",
    "sapo": "seq_mean_token_mean",
    "luspo": "seq_mean_token_sum",
    "vespo": "batch_token_mean",
    "dppo_tv": "batch_token_mean",  # verl 0.9.1's default "token-mean" over the whole batch
    "dppo_kl": "batch_token_mean",
}
CLIP_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "luspo")  # PPO's clipped surrogate
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence", "sequence_token")
DPPO_LOSS_TYPES = ("dppo_tv", "dppo_kl")  # a divergence mask in place of the ratio clip


def aggregate_loss(
    per_token: jax.Array,
    mask: jax.Array,
    seq_weight: jax.Array,
    kind: str,
    max_len: int,
    token_norm: jax.Array | None = None,
) -> jax.Array:
    """Reduce a per-token loss `[B, C]` to a scalar, ignoring padding (mask 0) exactly.

    With m_it = mask_it, w_i = seq_weight_i, |o_i| = sum_t m_it:
      * seq_mean_token_mean (GRPO, SAPO):  sum_i w_i (sum_t m_it l_it / |o_i|) / sum_i w_i
      * token_mean (BNPO):                 sum_i w_i sum_t m_it l_it / sum_i w_i |o_i|
      * batch_token_mean (DAPO, CISPO, VESPO): sum_i w_i sum_t m_it l_it / token_norm, with
        token_norm the whole batch's sum_i w_i |o_i| divided by the number of minibatches (TRL's
        normaliser of a generation batch spread over optimizer steps); None: this batch's
        sum_i w_i |o_i|, i.e. token_mean
      * constant (Dr. GRPO):               sum_i w_i sum_t m_it l_it / (sum_i w_i * max_len)
      * seq_mean_token_sum (LUSPO):        sum_i w_i sum_t m_it l_it / sum_i w_i
    The first weights a token by 1 / |o_i| (short sequences count more per token); the token
    means and the constant weight every token alike; the last weights a sequence by |o_i|.
    """
    chex.assert_equal_shape([per_token, mask])
    chex.assert_shape(seq_weight, per_token.shape[:1])
    masked = jnp.where(mask > 0, per_token, 0.0)  # where, not *: padding may hold inf/nan
    seq_sum = masked.sum(axis=1)
    num_seqs = jnp.maximum(seq_weight.sum(), 1e-8)
    if kind == "seq_mean_token_mean":
        per_seq = seq_sum / jnp.maximum(mask.sum(axis=1), 1.0)
        return jnp.sum(seq_weight * per_seq) / num_seqs
    if kind == "token_mean" or (kind == "batch_token_mean" and token_norm is None):
        return jnp.sum(seq_weight * seq_sum) / jnp.maximum(jnp.sum(seq_weight * mask.sum(1)), 1.0)
    if kind == "batch_token_mean":
        return jnp.sum(seq_weight * seq_sum) / jnp.maximum(jnp.mean(token_norm), 1.0)
    if kind == "constant":
        return jnp.sum(seq_weight * seq_sum) / (num_seqs * max_len)
    if kind == "seq_mean_token_sum":
        return jnp.sum(seq_weight * seq_sum) / num_seqs
    raise ValueError(f"unknown loss_agg {kind!r}; use one of {LOSS_AGGREGATIONS}")


def importance_ratio(
    logp: jax.Array, old_logp: jax.Array, mask: jax.Array, level: str
) -> jax.Array:
    """The importance ratio of every token `[B, C]` at `level`:

    * token:          r_it = pi(y_it) / pi_old(y_it)
    * sequence:       s_i = exp(sum_t m_it log r_it / |o_i|), the same for every token of
                      sequence i (GSPO, Zheng et al. 2025, arXiv:2507.18071; TRL's "sequence")
    * sequence_token: s_it = sg[s_i] * pi(y_it) / sg[pi(y_it)] (GSPO-token, same paper): the value
                      of s_i, the gradient of a token ratio scaled by s_i. With one advantage
                      per sequence and an aggregation weight c_i that is the same for every
                      token of sequence i (all of `LOSS_AGGREGATIONS`), the clipped loss's
                      gradient is the same as GSPO's, -c_i s_i A_i per unclipped token
                      (d s_i / d log pi_it = s_i / |o_i|, summed over the |o_i| tokens).
    """
    chex.assert_equal_shape([logp, old_logp, mask])
    log_ratio = jnp.where(mask > 0, logp - old_logp, 0.0)
    if level == "token":
        return jnp.exp(log_ratio)
    seq = jnp.exp(log_ratio.sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0))[:, None]
    if level == "sequence":
        return jnp.broadcast_to(seq, logp.shape)
    if level == "sequence_token":
        return jax.lax.stop_gradient(seq) * jnp.exp(logp - jax.lax.stop_gradient(logp))
    raise ValueError(
        f"unknown importance_sampling_level {level!r}; use one of {IMPORTANCE_SAMPLING_LEVELS}"
    )


def vespo_weight(
    logp: jax.Array, old_logp: jax.Array, mask: jax.Array, adv: jax.Array, hp: LMHParams
) -> jax.Array:
    """VESPO's per-sequence weight phi(w_i) `[B, 1]` (detached) from the sequence importance
    weight w_i = prod_t r_it (a sum of log-ratios, not GSPO's mean), with (k, lambda) by the sign
    of A_i; TRL 1.16's clamps (log r_it to +-20, log w_i to [log 1e-8, 20]) kept."""
    log_ratio = jnp.where(mask > 0, jnp.clip(logp - old_logp, -20.0, 20.0), 0.0)
    log_w = jnp.clip(log_ratio.sum(axis=1, keepdims=True), math.log(1e-8), 20.0)
    nonneg = adv[:, :1] >= 0
    k = jnp.where(nonneg, hp.vespo_k_pos, hp.vespo_k_neg)
    lam = jnp.maximum(jnp.where(nonneg, hp.vespo_lambda_pos, hp.vespo_lambda_neg), 1e-4)
    return losses.gamma_weight(jax.lax.stop_gradient(log_w), k, lam)


def policy_objective(
    logp: jax.Array, ratio: jax.Array, adv: jax.Array, batch: LMBatch, hp: LMHParams, loss_type: str
) -> tuple[jax.Array, dict]:
    """The per-token objective J_it `[B, C]` (the loss is -J) of `loss_type`, and its own
    metrics. `ratio` is the importance ratio at the configured level (`importance_ratio`),
    `adv` the advantages broadcast to tokens; eps_l, eps_h = hp.clip_eps_low, hp.clip_eps_high.

      * grpo, dr_grpo, dapo, bnpo, luspo: min(min(r, delta) A, clip(r, 1 - eps_l, 1 + eps_h) A),
        PPO's clipped surrogate (GRPO, Shao et al. 2024, eq. 3), the cap at delta only if
        hp.clip_delta > 0 (two-sided clipping, INTELLECT-2)
      * cispo: sg(min(r, 1 + eps_h)) A log pi (MiniMax-M1, MiniMax 2025, arXiv:2506.13585).
        TRL 1.16 caps at its `epsilon_high` itself (max=epsilon_high, recommended 5); where TRL
        and the paper disagree we follow the paper: TRL's epsilon_high = 1 + our clip_eps_high
      * sapo: 4 / tau sigmoid(tau (r - 1)) A, tau by the sign of A (SAPO, Qwen 2025)
      * vespo: phi(w_i) A log pi with phi the Gamma weight of the sequence weight (VESPO,
        arXiv:2602.10693; `vespo_weight`), independent of the importance sampling level
      * dppo_tv, dppo_kl: sg(min(r_it, C)) A log pi m_it, the token ratio truncated at
        C = hp.dppo_ratio_cap and the mask m_it of `rlax_trpo.losses.divergence_mask` (DPPO,
        arXiv:2602.04879, as verl 0.9.1's `compute_policy_loss_dppo_tv` / `_kl` write it,
        log-ratio clamped to +-20): the gradient is A grad r_it inside the region, 0 where the
        token's probability has moved by more than the threshold (hp.dppo_tv_low / _high,
        hp.dppo_kl_low / _high) the way A pushes it; token ratios whatever the level
    """
    if loss_type in CLIP_LOSS_TYPES:
        objective = losses.clipped_surrogate(
            ratio, adv, hp.clip_eps_low, hp.clip_eps_high, hp.clip_delta
        )
        capped = (hp.clip_delta > 0) & (ratio > hp.clip_delta) & (adv < 0)
        return objective, {"grpo/delta_frac": masked_mean(capped, batch.mask)}
    if loss_type == "cispo":
        weight = losses.truncated_is_weight(ratio, 1.0 + hp.clip_eps_high)
        objective = weight * jax.lax.stop_gradient(adv) * logp
        truncated = ratio > 1.0 + hp.clip_eps_high
        return objective, {"grpo/cispo_trunc_frac": masked_mean(truncated, batch.mask)}
    if loss_type == "sapo":
        objective = losses.soft_gate_surrogate(
            ratio, adv, hp.sapo_temperature_pos, hp.sapo_temperature_neg
        )
        gate = jax.nn.sigmoid(
            jnp.where(adv > 0, hp.sapo_temperature_pos, hp.sapo_temperature_neg) * (ratio - 1.0)
        )
        # the factor of A grad log pi: f'(r) r = 4 sigmoid (1 - sigmoid) r (1 on-policy)
        return objective, {
            "grpo/sapo_weight_mean": masked_mean(4 * gate * (1 - gate) * ratio, batch.mask)
        }
    if loss_type == "vespo":
        phi = vespo_weight(logp, batch.old_logprobs, batch.mask, adv, hp)
        objective = phi * jax.lax.stop_gradient(adv) * logp
        return objective, {"grpo/vespo_phi_mean": masked_mean(phi.squeeze(1), batch.seq_weight)}
    if loss_type in DPPO_LOSS_TYPES:
        old_logp = batch.old_logprobs
        token_ratio = jnp.exp(jnp.clip(logp - old_logp, -20.0, 20.0))
        weight = losses.truncated_is_weight(token_ratio, hp.dppo_ratio_cap)
        kind = loss_type.removeprefix("dppo_")
        low, high = (getattr(hp, f"{loss_type}_{side}") for side in ("low", "high"))
        valid = losses.divergence_mask(logp, old_logp, adv, low, high, kind)
        objective = weight * jax.lax.stop_gradient(adv) * logp * valid
        return objective, {"grpo/dppo_mask_frac": masked_mean(1.0 - valid, batch.mask)}
    raise ValueError(f"unknown loss_type {loss_type!r}; use one of {tuple(LOSS_TYPES)}")


def policy_loss(
    logp: jax.Array, batch: LMBatch, hp: LMHParams, cfg: LMGRPOConfig
) -> tuple[jax.Array, dict]:
    """The GRPO-family loss of per-token log-probs `logp` `[B, C]` under the current policy
    (a pure function of them, so it can be compared with TRL and differentiated on its own):

      l_it = -J_it + beta * KL_it(pi_theta || pi_ref) [* ratio_it if cfg.kl_bias_correction]

    J_it from `policy_objective` (by `cfg.loss_type`), the ratio from `importance_ratio` (by
    `cfg.importance_sampling_level`), KL_it by `cfg.kl_estimator` (k3: TRL's), aggregated by
    `cfg.loss_agg`, or by the loss type's own aggregation (`LOSS_TYPES`) when that is None.
    The bias-corrected KL (TRL's `use_bias_correction_kl`, DeepSeek-V3.2) multiplies by the
    ratio without stopping its gradient, as TRL does.
    """
    chex.assert_equal_shape([logp, batch.old_logprobs, batch.ref_logprobs, batch.mask])
    adv = jnp.broadcast_to(batch.advantages[:, None], logp.shape)
    ratio = importance_ratio(logp, batch.old_logprobs, batch.mask, cfg.importance_sampling_level)
    objective, type_metrics = policy_objective(logp, ratio, adv, batch, hp, cfg.loss_type)
    kl_ref = losses.kl_estimate(batch.ref_logprobs - logp, cfg.kl_estimator)  # KL(pi || pi_ref)
    kl = kl_ref * ratio if cfg.kl_bias_correction else kl_ref
    per_token = -objective + hp.kl_beta * kl
    agg = LOSS_TYPES[cfg.loss_type] if cfg.loss_agg is None else cfg.loss_agg
    loss = aggregate_loss(
        per_token, batch.mask, batch.seq_weight, agg, cfg.max_new_tokens, batch.token_norm
    )
    mask = batch.mask
    aux = {
        # where PPO's clip cuts the gradient (it does for the clip family; for cispo, sapo and
        # vespo the same measure of how far off-policy the ratios are)
        "grpo/clip_frac_low": masked_mean((adv < 0) & (ratio < 1.0 - hp.clip_eps_low), mask),
        "grpo/clip_frac_high": masked_mean((adv > 0) & (ratio > 1.0 + hp.clip_eps_high), mask),
        "grpo/ratio_mean": masked_mean(ratio, mask),
        **type_metrics,
        "policy/kl_new_old_k3": masked_mean(
            losses.kl_estimate(batch.old_logprobs - logp, "k3"), mask
        ),
        "policy/kl_ref": masked_mean(kl_ref, mask),
    }
    return loss, aux
