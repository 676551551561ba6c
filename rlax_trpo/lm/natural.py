"""TRPO and natural-gradient (NPG) updates of a language-model policy (`update: trpo | npg`).

One step per iteration on the whole batch of sampled completions, over the trained tree (the
LoRA adapters, or every weight), with the control algorithms' maths (`rlax_trpo.trust_region`):

    J(theta)  = agg_it(r_it A_i) - beta agg_it(KL_it(pi_theta || pi_ref))     the surrogate
    KL(theta) = mean_it k3(pi_old(y_it), pi_theta(y_it))                      over sampled tokens
    g = grad J(theta_old),  s ~= (F + d I)^-1 g by `jax.scipy.sparse.linalg.cg` on F v products
    theta' = theta_old + beta^j sqrt(2 delta / s^T F s) s    (trpo: the first j with
             KL(theta') <= slack * delta and J(theta') > J(theta_old); npg: j = 0, no check)

r_it = pi_theta(y_it) / pi_old(y_it), `agg` the loss type's aggregation (`loss_agg`), the KL to
the reference as the clipped losses have it (`kl_estimator`, `hp.kl_beta`).

The Fisher is that of the sampled tokens: the tokens y_it were drawn from pi_old, and the
Hessian of k3 = r - 1 - log r at theta_old is the mean over tokens of grad log pi(y_it) grad
log pi(y_it)^T, a Monte Carlo estimate of the Fisher of the token distributions that needs the
log-probs of the sampled tokens only (what `LMPolicy.logprobs` gives; the whole-vocabulary KL
would need every logit of every position). The measured KL of the line search is the same
estimator at the candidate. Library code never jits: `make_grpo`'s iteration calls `update`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from rlax_trpo import losses, trust_region
from rlax_trpo.lm.objectives import LOSS_TYPES, aggregate_loss, importance_ratio
from rlax_trpo.lm.types import LMBatch, LMGRPOConfig, LMHParams, LMShared
from rlax_trpo.losses import masked_mean

TRUST_REGION_UPDATES = ("trpo", "npg")
NO_SHARED = LMShared()


def surrogate(logp: jax.Array, batch: LMBatch, hp: LMHParams, cfg: LMGRPOConfig) -> jax.Array:
    """J: the importance-weighted advantage minus the KL penalty to the reference, aggregated
    over tokens and sequences as the loss type's loss is (`aggregate_loss`). Its gradient at
    theta_old is the policy gradient; it is to be maximised."""
    adv = jnp.broadcast_to(batch.advantages[:, None], logp.shape)
    ratio = importance_ratio(logp, batch.old_logprobs, batch.mask, cfg.importance_sampling_level)
    kl_ref = losses.kl_estimate(batch.ref_logprobs - logp, cfg.kl_estimator)
    per_token = ratio * jax.lax.stop_gradient(adv) - hp.kl_beta * kl_ref
    agg = LOSS_TYPES[cfg.loss_type] if cfg.loss_agg is None else cfg.loss_agg
    return aggregate_loss(
        per_token, batch.mask, batch.seq_weight, agg, cfg.max_new_tokens, batch.token_norm
    )


def token_kl(logp: jax.Array, old_logp: jax.Array) -> jax.Array:
    """k3 = r - 1 - log r per token, r = pi_theta / pi_old: an estimate of KL(pi_old || pi_theta)
    from tokens drawn from pi_old (Schulman 2020), >= 0, 0 with its gradient at theta_old."""
    return losses.kl_estimate(logp - old_logp, "k3")


def mean_token_kl(
    logp_of: Callable[..., jax.Array], old_logp: jax.Array, mask: jax.Array
) -> Callable[..., jax.Array]:
    """theta -> the mean over completion tokens (`mask`) of `token_kl` against the fixed
    `old_logp`: the KL whose Hessian at theta_old is the Fisher of the step."""
    old_logp = jax.lax.stop_gradient(old_logp)
    return lambda params: masked_mean(token_kl(logp_of(params), old_logp), mask)


def make_natural_update(
    logprobs: Callable[..., jax.Array], cfg: LMGRPOConfig, kind: str
) -> Callable[..., tuple]:
    """The `update` of `make_grpo` for `kind` "trpo" or "npg". `logprobs(params, batch, hp,
    shared) -> [B, C]` are the trained `params`' log-probs of the batch's completion tokens.
    The optimiser state passes through untouched."""
    if kind not in TRUST_REGION_UPDATES:
        raise ValueError(f"update: {kind!r} is not one of {TRUST_REGION_UPDATES}")

    def update(params, opt_state, batch: LMBatch, hp: LMHParams, key, shared=NO_SHARED):
        del key  # one deterministic step on the whole batch
        logp_of = lambda q: logprobs(q, batch, hp, shared)
        if batch.old_logprobs is None:
            batch = batch._replace(old_logprobs=jax.lax.stop_gradient(logp_of(params)))
        old = batch.old_logprobs
        objective = lambda q: surrogate(logp_of(q), batch, hp, cfg)
        mean_kl = mean_token_kl(logp_of, old, batch.mask)
        j_old, grad = jax.value_and_grad(objective)(params)
        step = trust_region.natural_step(
            mean_kl, params, grad, hp.max_kl, hp.cg_damping, cfg.cg_iters, hp.cg_tol
        )
        if kind == "npg":
            new_params = trust_region.tree_axpy(1.0, step.step, params)
            accepted, fraction = jnp.asarray(True), jnp.asarray(1.0)
            gain = objective(new_params) - j_old
        else:
            search = trust_region.backtracking_line_search(
                lambda q: (objective(q) - j_old, mean_kl(q)),
                params,
                step.step,
                trust_region.line_search_fractions(hp.line_search_decay, cfg.line_search_steps),
                hp.max_kl,
                hp.kl_slack,
                batch=1,  # one candidate's activations at a time, until one passes
            )
            new_params, accepted, fraction = search.params, search.accepted, search.fraction
            gain = search.improvement  # the search's own, 0 when it rejects
        metrics = {
            "trpo/accepted": accepted.astype(jnp.float32),
            "trpo/step_fraction": fraction,
            "trpo/surrogate_gain": gain,
            "trpo/expected_gain": step.expected_improvement,
            "trpo/quadratic_kl": step.quadratic_kl,
            "trpo/cg_residual": step.cg_residual,
            "loss/grad_norm": step.grad_norm,
            "loss/total": -j_old,
        }
        return new_params, opt_state, metrics

    return update
