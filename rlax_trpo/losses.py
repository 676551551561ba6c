"""Losses: policy gradient, clipped surrogate, KL estimators, entropy, log barrier, value.

All are pure functions of arrays that return scalars (means over the given elements) or
per-element arrays, as documented. An optional `mask` weights elements (1 keeps, 0 drops).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def masked_mean(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """sum(mask * x) / max(sum(mask), 1): the mean of x over the elements where mask is 1 (all
    elements if mask is None). Masked-out elements are dropped with `where`, not multiplied by
    zero, so padding holding inf or NaN cannot leak into the mean."""
    if mask is None:
        return x.mean()
    return jnp.sum(jnp.where(mask > 0, x * mask, 0.0)) / jnp.maximum(mask.sum(), 1.0)


def normalize(x: jax.Array, mask: jax.Array | None = None, eps: float = 1e-8) -> jax.Array:
    """(x - mean) / (std + eps) over the (masked) elements."""
    mean = masked_mean(x, mask)
    std = jnp.sqrt(masked_mean((x - mean) ** 2, mask))
    return (x - mean) / (std + eps)


def policy_gradient_loss(
    log_probs: jax.Array, advantages: jax.Array, mask: jax.Array | None = None
) -> jax.Array:
    """REINFORCE loss -mean(log pi(a|s) * A) (Williams 1992), advantages stop-gradiented."""
    chex.assert_equal_shape([log_probs, advantages])
    return -masked_mean(log_probs * jax.lax.stop_gradient(advantages), mask)


def clipped_surrogate(
    ratios: jax.Array,
    advantages: jax.Array,
    clip_eps_low: jax.Array | float,
    clip_eps_high: jax.Array | float | None = None,
    delta: jax.Array | float | None = None,
) -> jax.Array:
    """Per-element clipped objective min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
    (Schulman 2017, eq. 7), advantages stop-gradiented; `clip_eps_high` defaults to
    `clip_eps_low` (symmetric PPO), DAPO (Yu et al. 2025) decouples them. With `delta` > 0 the
    unclipped ratio is also capped, min(min(r, delta) A, clip(r) A), so a negative advantage
    cannot push a ratio far above 1 without bound (two-sided clipping, INTELLECT-2, Prime
    Intellect 2025; TRL's `delta`); `delta` <= 0 or None is the plain objective. Useful values
    lie above 1 + eps_high (below it the cap also bites for A > 0)."""
    chex.assert_equal_shape([ratios, advantages])
    high = clip_eps_low if clip_eps_high is None else clip_eps_high
    advantages = jax.lax.stop_gradient(advantages)
    clipped = jnp.clip(ratios, 1.0 - clip_eps_low, 1.0 + high)
    if delta is not None:
        ratios = jnp.where(delta > 0, jnp.minimum(ratios, delta), ratios)
    return jnp.minimum(ratios * advantages, clipped * advantages)


def clipped_surrogate_loss(
    ratios: jax.Array,
    advantages: jax.Array,
    clip_eps_low: jax.Array | float,
    clip_eps_high: jax.Array | float | None = None,
    mask: jax.Array | None = None,
) -> jax.Array:
    """PPO-clip loss -mean(min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)) over `mask`."""
    return -masked_mean(clipped_surrogate(ratios, advantages, clip_eps_low, clip_eps_high), mask)


def clip_fractions(
    ratios: jax.Array,
    advantages: jax.Array,
    clip_eps_low: jax.Array | float,
    clip_eps_high: jax.Array | float | None = None,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Fractions of elements where the low / high clip is active (its gradient is zero)."""
    high = clip_eps_low if clip_eps_high is None else clip_eps_high
    low_active = (ratios < 1.0 - clip_eps_low) & (advantages < 0)
    high_active = (ratios > 1.0 + high) & (advantages > 0)
    return masked_mean(low_active.astype(jnp.float32), mask), masked_mean(
        high_active.astype(jnp.float32), mask
    )


def kl_estimate(log_ratio: jax.Array, kind: str = "k3") -> jax.Array:
    """Per-sample estimators of KL(q || p) from x ~ q, with log_ratio = log p(x) - log q(x).

    Schulman (2020), "Approximating KL divergence":
      k1 = -log r                (unbiased, high variance, can be negative)
      k2 = (log r)^2 / 2         (biased, low variance, >= 0)
      k3 = (r - 1) - log r       (unbiased, >= 0)
    For GRPO's KL(pi_theta || pi_ref), sampling pi_theta: log_ratio = log pi_ref - log pi_theta.
    """
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        return jnp.expm1(log_ratio) - log_ratio
    raise ValueError(f"unknown KL estimator {kind!r}; use k1, k2 or k3")


def log_barrier(logits: jax.Array, legal: jax.Array | None = None) -> jax.Array:
    """-KL(U || softmax(logits)) per state, U uniform over the K actions of the last axis:
    mean_a log pi(a) + log K (0 at the uniform policy, -> -inf as any pi(a) -> 0). With
    `legal` (bool `[..., K]`, a masked policy), U is uniform over the legal actions and the
    mean is theirs: the illegal actions, of probability 0, are not pulled toward U.

    The relative-entropy ("log barrier") regulariser of softmax policies in Agarwal, Kakade,
    Lee and Mahajan (2021, "On the theory of policy gradient methods"). Its gradient in the
    logits is 1/K - pi(a), which does not vanish as the policy becomes deterministic, unlike
    the entropy's -pi(a)(log pi(a) + H).
    """
    log_p = jax.nn.log_softmax(logits)
    if legal is None:
        return log_p.mean(-1) + jnp.log(log_p.shape[-1])
    count = legal.sum(-1)
    return jnp.where(legal, log_p, 0.0).sum(-1) / count + jnp.log(count)


def value_loss(
    values: jax.Array,
    targets: jax.Array,
    old_values: jax.Array | None = None,
    clip_eps: jax.Array | float | None = None,
    mask: jax.Array | None = None,
) -> jax.Array:
    """0.5 * mean((V - R)^2); with `old_values` and `clip_eps`, the PPO clipped form
    0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)) (Huang et al. 2022)."""
    chex.assert_equal_shape([values, targets])
    targets = jax.lax.stop_gradient(targets)
    loss = (values - targets) ** 2
    if old_values is not None and clip_eps is not None:
        clipped = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
        loss = jnp.maximum(loss, (clipped - targets) ** 2)
    return 0.5 * masked_mean(loss, mask)


def soft_gate_surrogate(
    ratios: jax.Array,
    advantages: jax.Array,
    temperature_pos: jax.Array | float,
    temperature_neg: jax.Array | float,
) -> jax.Array:
    """Per-element SAPO objective f(r) A with the soft gate f(r) = 4 / tau * sigmoid(tau (r - 1))
    (Soft Adaptive Policy Optimization, Qwen 2025, arXiv:2511.20347); tau is
    `temperature_pos` where A > 0, else `temperature_neg`. f'(1) = 1, so on-policy the gradient
    is the policy gradient A grad log pi; off-policy, f'(r) r = 4 sigmoid (1 - sigmoid) r decays
    smoothly instead of a hard clip's cut to zero. Advantages stop-gradiented."""
    chex.assert_equal_shape([ratios, advantages])
    advantages = jax.lax.stop_gradient(advantages)
    tau = jnp.where(advantages > 0, temperature_pos, temperature_neg)
    return jax.nn.sigmoid(tau * (ratios - 1.0)) * 4.0 / tau * advantages


def truncated_is_weight(ratios: jax.Array, cap: jax.Array | float) -> jax.Array:
    """CISPO's importance weight sg(min(r, cap)) (MiniMax-M1, MiniMax 2025, arXiv:2506.13585;
    no lower bound, cap = 1 + eps_high^IS): the ratio is truncated and detached, so
    it scales the REINFORCE term sg(w) A log pi of every token instead of dropping the gradient
    of the clipped ones, as PPO's clip does."""
    return jax.lax.stop_gradient(jnp.minimum(ratios, cap))


def gamma_weight(log_w: jax.Array, k: jax.Array | float, lam: jax.Array | float) -> jax.Array:
    """VESPO's Gamma weighting phi(w) = e^lam w^k e^{-lam w}, normalised to phi(1) = 1, from a
    log importance weight (VESPO, arXiv:2602.10693, as TRL 1.16 implements it): it down-weights
    both w << 1 (the power k) and w >> 1 (the decay lam). Computed in log space, detached (a
    gradient scale only); overflow and NaN give weight 0."""
    log_phi = lam + k * log_w - lam * jnp.exp(log_w)
    phi = jnp.nan_to_num(jnp.exp(log_phi), nan=0.0, posinf=0.0, neginf=0.0)
    return jax.lax.stop_gradient(phi)


def divergence_mask(
    logp: jax.Array,
    old_logp: jax.Array,
    advantages: jax.Array,
    low: jax.Array | float,
    high: jax.Array | float,
    kind: str,
) -> jax.Array:
    """DPPO's trust-region mask (Qi et al. 2026, "Rethinking the Trust Region in LLM RL",
    arXiv:2602.04879): 1 where a token may still move, 0 where it has already left the region
    in the direction its advantage pushes it. With p = pi(y), q = pi_old(y) of the sampled token:

      * tv: the probability change, p - q <= high when A > 0, p - q >= -low otherwise
      * kl: the binary KL between Bernoulli(q) and Bernoulli(p),
            q log(q / p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8)),
            at most high when A > 0 unless p <= q, at most low otherwise unless p >= q

    The 1e-8 is verl 0.9.1's, for equal numbers. Detached: the mask selects, it has no
    gradient."""
    p, q = jnp.exp(logp), jnp.exp(old_logp)
    if kind == "tv":
        valid = jnp.where(advantages > 0, p - q <= high, p - q >= -low)
    elif kind == "kl":
        binary_kl = q * (old_logp - logp) + (1 - q) * jnp.log((1 - q + 1e-8) / (1 - p + 1e-8))
        valid = jnp.where(
            advantages > 0, (binary_kl <= high) | (p <= q), (binary_kl <= low) | (p >= q)
        )
    else:
        raise ValueError(f"unknown divergence {kind!r}; use 'tv' or 'kl'")
    return jax.lax.stop_gradient(valid.astype(logp.dtype))
