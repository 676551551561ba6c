"""Advantage estimators: truncation-aware GAE(lambda), Monte Carlo, n-step, group-relative.

Every function is pure, time-major (`[T, ...]`, any trailing batch dims) and traceable
with `gamma`/`lambda_` as traced scalars, so the hyperparameters can be vmapped.

The gymnax 1.0 contract is kept apart all the way down: a step is described by
  * `discounts[t]  = gamma * (1 - terminated[t])`   -- only termination zeroes the bootstrap,
  * `next_values[t] = V(final_observation[t])`      -- the state before any automatic reset,
  * `continues[t]  = 1 - (terminated[t] | truncated[t])` -- both end flags cut the trace.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def env_discounts(terminated: jax.Array, gamma: jax.Array | float) -> jax.Array:
    """Per-step bootstrap discount gamma * (1 - terminated), shape of `terminated`."""
    return gamma * (1.0 - terminated.astype(jnp.float32))


def env_continues(terminated: jax.Array, truncated: jax.Array) -> jax.Array:
    """1 where the episode goes on after step t, 0 where it ended (either way)."""
    return 1.0 - jnp.logical_or(terminated, truncated).astype(jnp.float32)


def generalized_advantage_estimation(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    discounts: jax.Array,
    trace_decays: jax.Array,
) -> jax.Array:
    """GAE with a separate bootstrap discount and trace decay per step.

    Schulman et al. 2016, eq. 16, written so that truncation is exact:
        delta_t = r_t + discounts_t * next_values_t - values_t
        A_t     = delta_t + trace_decays_t * A_{t+1},   A_T = 0.

    For an environment rollout use `discounts = gamma (1 - terminated)` and
    `trace_decays = gamma * lambda * (1 - done)`; for rlax-style sequences with T+1 values
    use `next_values = v[1:]` and `trace_decays = lambda * discounts`.

    Args:
      rewards, values, next_values, discounts, trace_decays: `[T, ...]`, all the same shape.

    Returns:
      Advantages `[T, ...]`.
    """
    chex.assert_equal_shape([rewards, values, next_values, discounts, trace_decays])
    deltas = rewards + discounts * next_values - values

    def backward(carry, xs):
        delta, decay = xs
        advantage = delta + decay * carry
        return advantage, advantage

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(deltas[0]), (deltas, trace_decays), reverse=True
    )
    return advantages


def gae_from_env(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: jax.Array | float,
    lambda_: jax.Array | float,
) -> jax.Array:
    """Truncation-aware GAE(lambda) of a gymnax rollout, all inputs `[T, B]`.

    Termination zeroes the bootstrap; truncation keeps it (through `V(final_observation)`)
    but cuts the trace, as does the rollout end (A_T = 0 with next_values[T-1] bootstrapping).
    """
    discounts = env_discounts(terminated, gamma)
    decays = gamma * lambda_ * env_continues(terminated, truncated)
    return generalized_advantage_estimation(rewards, values, next_values, discounts, decays)


def monte_carlo_from_env(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: jax.Array | float,
) -> jax.Array:
    """Monte Carlo advantage G_t - V(s_t), `[T, B]` (REINFORCE with a baseline).

    G_t sums discounted rewards to the episode end. Where the episode does not end inside
    the rollout (or is truncated), the tail is bootstrapped with V, as it must be to be an
    unbiased estimate of the untruncated return; this equals GAE with lambda = 1.
    """
    return gae_from_env(rewards, values, next_values, terminated, truncated, gamma, 1.0)


def n_step_from_env(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    gamma: jax.Array | float,
    n: int,
) -> jax.Array:
    """n-step (A3C(k)) advantage, `[T, B]` (Mnih et al. 2016, eq. for R_t with k steps).

        G_t^(n) = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - term) V(s'_{t+m-1})
    where m <= n stops early at an episode end (termination: no bootstrap; truncation:
    bootstrap from V(final_observation)) or at the rollout end. Returns G - V(s_t).

    `n` is static; the loop over the window is unrolled n times, never over time.
    """
    chex.assert_equal_shape([rewards, values, next_values, terminated, truncated])
    if n < 1:
        raise ValueError(f"n_step must be >= 1, got {n}")
    T = rewards.shape[0]
    done = jnp.logical_or(terminated, truncated)
    boot = env_discounts(terminated, gamma) * next_values

    def shifted(x, k, fill):
        pad = jnp.full((k,) + x.shape[1:], fill, x.dtype)
        return jnp.concatenate([x[k:], pad], axis=0) if k else x

    ret = jnp.zeros_like(rewards)
    scale = jnp.ones_like(rewards)
    alive = jnp.ones(rewards.shape, bool)
    for k in range(min(n, T)):
        r_k, b_k, d_k = shifted(rewards, k, 0.0), shifted(boot, k, 0.0), shifted(done, k, True)
        last = jnp.arange(T).reshape((T,) + (1,) * (rewards.ndim - 1)) + k >= T - 1
        end_here = alive & (d_k | last | (k == n - 1))
        ret = ret + jnp.where(alive, scale * r_k, 0.0) + jnp.where(end_here, scale * b_k, 0.0)
        scale = scale * gamma
        alive = alive & ~end_here
    return ret - values


def group_relative_advantages(
    rewards: jax.Array,
    kind: str = "grpo",
    ddof: int = 0,
    std_floor: float | jax.Array = 1e-6,
) -> tuple[jax.Array, jax.Array]:
    """Group-relative advantages for rewards of shape `[N, G]` (N groups of G samples).

    kind:
      * "grpo":    (r_i - mean r) / max(std r, floor)     (Shao et al. 2024, DeepSeekMath)
      * "dr_grpo": r_i - mean r                             (Liu et al. 2025, Dr. GRPO)
      * "rloo":    r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean r)  (Ahmadian et al. 2024)

    Returns:
      (advantages `[N, G]`, nonzero `[N]`): `nonzero` is False for groups whose rewards are
      all equal; their advantages are exactly 0 (never NaN) for every kind.
    """
    chex.assert_rank(rewards, 2)
    group = rewards.shape[1]
    mean = rewards.mean(axis=1, keepdims=True)
    centred = rewards - mean
    spread = jnp.max(jnp.abs(centred), axis=1)
    nonzero = spread > 1e-8 * (1.0 + jnp.max(jnp.abs(rewards), axis=1))
    if kind == "grpo":
        if group - ddof <= 0:
            raise ValueError(f"std with ddof={ddof} needs group_size > {ddof}")
        std = jnp.sqrt(jnp.sum(centred**2, axis=1, keepdims=True) / (group - ddof))
        adv = centred / jnp.maximum(std, std_floor)
    elif kind == "dr_grpo":
        adv = centred
    elif kind == "rloo":
        if group < 2:
            raise ValueError("rloo needs group_size >= 2")
        adv = centred * group / (group - 1)
    else:
        raise ValueError(f"unknown group advantage kind {kind!r}; use grpo, dr_grpo, rloo")
    adv = jnp.where(nonzero[:, None], adv, 0.0)
    return adv, nonzero


def group_normalizer(group_size: int, kind: str = "mean") -> float:
    """The divisor of a group's summed loss: G ("mean", GRPO) or sqrt(G) ("sqrt").

    Dividing the group sum by sqrt(G) instead of G rescales the gradient by sqrt(G) (a
    learning-rate change under SGD, nearly a no-op under Adam); docs/grpo_results.md compares
    the two.
    """
    if kind == "mean":
        return float(group_size)
    if kind == "sqrt":
        return float(group_size) ** 0.5
    raise ValueError(f"unknown group normalizer {kind!r}; use mean or sqrt")


def first_episode_mask(terminated: jax.Array, truncated: jax.Array) -> jax.Array:
    """1 on the steps of each column's first episode (its end step included), else 0.

        alive_t = prod_{s < t} (1 - done_s),   done = terminated | truncated,   `[T, B]`.

    Steps after the first end belong to an auto-reset continuation and are masked out.
    """
    chex.assert_equal_shape([terminated, truncated])
    done = jnp.logical_or(terminated, truncated).astype(jnp.float32)
    ended_before = jnp.cumsum(done, axis=0) - done
    return (ended_before == 0).astype(jnp.float32)


def discounted_returns_to_go(
    rewards: jax.Array, mask: jax.Array, gamma: jax.Array | float
) -> jax.Array:
    """G_t = sum_{k >= t} gamma^{k-t} mask_k r_k over a masked first episode, `[T, B]`.

    With `mask` from `first_episode_mask`, G_t is the (discounted) return-to-go of the first
    episode, 0 after it ends; gamma = 1 gives G_0 = the episodic return.
    """
    chex.assert_equal_shape([rewards, mask])

    def backward(carry, xs):
        r, m = xs
        g = m * (r + gamma * carry)
        return g, g

    _, returns = jax.lax.scan(backward, jnp.zeros_like(rewards[0]), (rewards, mask), reverse=True)
    return returns


def grouped_step_advantages(
    returns_to_go: jax.Array,
    mask: jax.Array,
    group_size: int,
    kind: str = "grpo",
    ddof: int = 0,
    std_floor: float | jax.Array = 1e-6,
) -> tuple[jax.Array, jax.Array]:
    """Per-step group-relative advantages for grouped rollouts, `[T, N*G]` -> `[T, N*G]`.

    The G members of a group start from one state and are time-aligned, so at each step t the
    group's returns-to-go G_t^{(1..G)} (0 for members whose episode has ended) form a group:
        A_t^{(i)} = group_relative(G_t^{(1..G)})_i            (`group_relative_advantages`)
    Columns are laid out group-major (column b belongs to group b // G).

    Returns:
      (advantages `[T, N*G]`, nonzero `[T, N]`), advantages masked by `mask`.
    """
    chex.assert_equal_shape([returns_to_go, mask])
    T, B = returns_to_go.shape
    if B % group_size:
        raise ValueError(f"num_envs {B} is not a multiple of group_size {group_size}")
    adv, nonzero = group_relative_advantages(
        returns_to_go.reshape(T * (B // group_size), group_size), kind, ddof, std_floor
    )
    return adv.reshape(T, B) * mask, nonzero.reshape(T, B // group_size)
