"""GRPO for control and bandits (Shao et al. 2024, DeepSeekMath), with grouped rollouts.

No critic: the baseline of a trajectory is the mean reward of the G trajectories that started
from exact copies of its start state (`rlax_trpo.algorithms.grouped`). One iteration:

  1. collect N groups of G episodes over a horizon T (`num_envs = N*G`, `num_steps = T`);
  2. r_i = episodic return of each trajectory's first episode (or, with `per_step_returns`,
     discounted returns-to-go compared across the group at each step);
  3. A_i = group-relative advantage (`group_advantage`: grpo | dr_grpo | rloo), applied to
     every step of trajectory i; groups whose rewards are all equal are masked out and counted;
  4. `num_epochs` (mu) passes over `num_minibatches` minibatches of whole groups, minimising

        L = 1/|groups| sum_groups 1/c(G) sum_i 1/T sum_t m_{i,t} [ -min(r A, clip(r, 1-eps_lo,
            1+eps_hi) A) + beta k(pi_theta, pi_ref) - c_H H ]

     with r = pi_theta / pi_old per step, c(G) = G (`group_normalizer: mean`) or sqrt(G)
     (`sqrt`), the constant horizon T as the length normaliser (Dr. GRPO), k the chosen KL
     estimator of KL(pi_theta || pi_ref) (k1 | k2 | k3), and pi_ref the initial policy,
     refreshed to the current one every `ref_refresh_every` iterations (0: never).

With mu = 1 the ratio is 1 on the only pass and, with beta = 0, the gradient is REINFORCE with
the group baseline.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import chex
import flax.struct
import jax
import jax.numpy as jnp
from pydantic import Field

from rlax_trpo import advantages as adv_lib
from rlax_trpo import losses
from rlax_trpo.algorithms.base import Algorithm, AlgorithmSpec
from rlax_trpo.algorithms.common import (
    anneal,
    make_optimizer,
    minibatch_descent,
    minibatches,
    set_learning_rate,
)
from rlax_trpo.algorithms.grouped import (
    group_ids,
    grouped_log_prob,
    make_grouped_collect,
    warn_short_horizon,
)
from rlax_trpo.algorithms.sections import OptimizerFields, OptimizerHParams
from rlax_trpo.config.configuration import Config
from rlax_trpo.config.fields import HParams, hp_field, read_with
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import Networks, policy_on
from rlax_trpo.types import Params, Trajectory


class GRPOFields(OptimizerFields):
    """GRPO for control: groups of `group_size` rollouts from copies of one start state."""

    num_epochs: int = Field(4, gt=0)
    num_minibatches: int = Field(4, gt=0)  # divides the number of groups
    group_size: int = Field(8, gt=0)
    group_advantage: Literal["grpo", "dr_grpo", "rloo"] = "grpo"
    group_normalizer: Literal["mean", "sqrt"] = "mean"
    std_ddof: int = Field(0, ge=0)
    per_step_returns: bool = False  # process supervision: normalised returns-to-go
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    ref_refresh_every: int = Field(0, ge=0)  # 0: pi_ref is the initial policy

    read_only_with = {  # only group_advantage: grpo divides by the group's std
        "std_ddof": read_with("group_advantage", "grpo"),
        "hp.std_floor": read_with("group_advantage", "grpo"),
    }


@flax.struct.dataclass
class GRPOHParams(OptimizerHParams):
    clip_eps_low: Any = hp_field(0.2, gt=0)
    clip_eps_high: Any = hp_field(0.2, gt=0)
    ent_coef: Any = hp_field(0.01, ge=0)
    kl_beta: Any = hp_field(1.0, ge=0)  # weight of KL(pi || pi_ref)
    std_floor: Any = hp_field(1e-6, gt=0)


class GRPOBatch(NamedTuple):
    """A grouped batch. Step fields are `[T, N*G, ...]` with columns laid out group-major."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array  # log pi_old(a|s) at collection time
    advantage: jax.Array  # group-relative advantage, 0 where masked
    mask: jax.Array  # 1 on first-episode steps of groups that are not zero-variance
    alive: jax.Array  # 1 on first-episode steps
    group_id: jax.Array  # int32 group index of every step
    outcome: jax.Array  # `[N*G]` episodic return of each trajectory's first episode
    zero_std: jax.Array  # `[N]` 1 where the group was masked out for zero reward variance
    first: Any = None  # with memory: `[T, N*G]` steps that begin an episode
    memory: Any = None  # with memory: the start `Memory`, `[N*G, ...]` (zeros: fresh groups)
    action_mask: Any = None  # with an action mask: `[T, N*G, num_actions]` legal actions


class GRPOState(NamedTuple):
    opt_state: Any
    ref_policy: Any  # pi_ref parameters
    updates: jax.Array  # update calls so far (annealing, reference refresh)


class _Steps(NamedTuple):
    """Per-step fields an update iterates over, `[T, N*G, ...]` (or regrouped minibatches)."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    ref_log_prob: jax.Array
    advantage: jax.Array
    mask: jax.Array
    alive: jax.Array
    group_id: jax.Array
    first: Any = None  # with memory: `[T, N*G]`, regrouped `[N, T, G]`
    memory: Any = None  # with memory: `[N*G, ...]`, regrouped `[N, G, ...]`
    action_mask: Any = None  # with an action mask: as `first`, `[..., num_actions]`


def check_grpo_config(config: Config) -> None:
    """Host-side checks of the grouped layout; one-line ConfigErrors naming the key."""
    g = config.group_size
    if config.num_envs % g:
        raise ConfigError(
            f"num_envs: {config.num_envs} is not a multiple of group_size {g} "
            "(num_envs = groups x group_size)"
        )
    if g < 2:
        raise ConfigError("group_size: GRPO needs at least 2 samples per group (got 1)")
    if g <= config.std_ddof:
        raise ConfigError(f"std_ddof: {config.std_ddof} needs group_size > {config.std_ddof}")
    groups = config.num_envs // g
    if groups % config.num_minibatches:
        raise ConfigError(
            f"num_minibatches: {config.num_minibatches} does not divide the "
            f"{groups} groups (num_envs / group_size); GRPO splits whole groups"
        )
    if config.normalize_reward:
        raise ConfigError(
            "normalize_reward: not supported by grpo (advantages are already "
            "normalised within each group)"
        )


def grpo_advantages(
    config: Config, traj: Trajectory, hp: HParams
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Advantages `[T, B]`, first-episode mask `[T, B]`, outcomes `[B]`, nonzero `[T, N]`.

    Episodic (default): A_{i,t} = group_relative(r)_i on every step of the first episode, with
    r_i = sum_t r_{i,t} (undiscounted first-episode return). `per_step_returns`: the group is
    compared at each step on discounted returns-to-go (`grouped_step_advantages`).
    """
    g = config.group_size
    steps, width = traj.reward.shape
    alive = adv_lib.first_episode_mask(traj.terminated, traj.truncated)
    outcome = (traj.reward * alive).sum(axis=0)
    if config.per_step_returns:
        rtg = adv_lib.discounted_returns_to_go(traj.reward, alive, hp.gamma)
        adv, nonzero = adv_lib.grouped_step_advantages(
            rtg, alive, g, config.group_advantage, config.std_ddof, hp.std_floor
        )
    else:
        adv, nonzero = adv_lib.group_relative_advantages(
            outcome.reshape(width // g, g), config.group_advantage, config.std_ddof, hp.std_floor
        )
        adv = adv.reshape(1, width) * alive
        nonzero = jnp.broadcast_to(nonzero, (steps, width // g))
    return adv, alive, outcome, nonzero


def grpo_loss_terms(
    log_prob: jax.Array,
    old_log_prob: jax.Array,
    ref_log_prob: jax.Array,
    advantage: jax.Array,
    clip_eps_low: jax.Array,
    clip_eps_high: jax.Array,
    kl_estimator: str,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-step (surrogate loss, KL(pi_theta || pi_ref) estimate, ratio), all of one shape.

    surrogate = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A),   r = pi_theta / pi_old
    kl        = k(log pi_ref - log pi_theta)          (Schulman 2020 estimators k1/k2/k3)
    """
    ratio = jnp.exp(log_prob - old_log_prob)
    surrogate = -losses.clipped_surrogate(ratio, advantage, clip_eps_low, clip_eps_high)
    kl = losses.kl_estimate(ref_log_prob - log_prob, kl_estimator)
    return surrogate, kl, ratio


def group_loss_weights(mask: jax.Array, normalizer: str = "mean") -> jax.Array:
    """Per-step loss weights of grouped data, `mask` `[n, T, G]` -> `[n, T, G]`.

        w_{k,t,i} = m_{k,t,i} / (T * c(G) * n_active),   c(G) = G ("mean") or sqrt(G) ("sqrt")

    so sum(w * l) = 1/n_active sum_groups 1/c(G) sum_i 1/T sum_t m l: the constant horizon T as
    the length normaliser (Dr. GRPO, Liu et al. 2025), the group sum divided by c(G), and the
    mean over the groups that are not masked out (zero-variance groups drop from the count).
    """
    chex.assert_rank(mask, 3)
    _, horizon, group = mask.shape
    active = jnp.maximum((mask.sum(axis=(1, 2)) > 0).sum(), 1.0)
    return mask / (horizon * adv_lib.group_normalizer(group, normalizer) * active)


def _regroup(x: jax.Array, group_size: int) -> jax.Array:
    """`[T, N*G, ...]` -> `[N, T, G, ...]` (one leading row per group)."""
    t, b = x.shape[:2]
    x = x.reshape((t, b // group_size, group_size) + x.shape[2:])
    return jnp.moveaxis(x, 1, 0)


def group_minibatches(steps: _Steps, key: jax.Array, group_size: int, num_minibatches: int):
    """Shuffle whole groups and split them: every leaf `[M, N/M, T, G, ...]` (a start
    memory `[M, N/M, G, ...]`)."""
    groups = jax.tree.map(lambda x: _regroup(x, group_size), steps._replace(memory=None))
    start = jax.tree.map(lambda x: x.reshape((-1, group_size) + x.shape[1:]), steps.memory)
    return minibatches(groups._replace(memory=start), key, num_minibatches)


def make_grpo(config: Config, networks: Networks) -> Algorithm:
    """GRPO for control: grouped rollouts, group-relative advantages, and `num_epochs`
    passes over minibatches of whole groups minimising the clipped, KL-regularised loss of
    the module docstring (no critic)."""
    check_grpo_config(config)
    g = config.group_size
    optimizer = make_optimizer(config)

    def init(params: Params, hp: HParams) -> GRPOState:
        return GRPOState(optimizer.init(params.policy), params.policy, jnp.zeros((), jnp.int32))

    def make_batch(params: Params, traj: Trajectory, hp: HParams) -> GRPOBatch:
        adv, alive, outcome, nonzero = grpo_advantages(config, traj, hp)
        width = traj.reward.shape[1]
        keep = jnp.repeat(nonzero, g, axis=1).astype(jnp.float32)
        zero_std = 1.0 - nonzero.any(axis=0).astype(jnp.float32)
        ids = jnp.broadcast_to(group_ids(width // g, g), adv.shape)
        head = (traj.obs, traj.action, traj.log_prob, adv, alive * keep, alive, ids, outcome)
        return GRPOBatch(*head, zero_std, traj.first, traj.memory, traj.action_mask)

    def loss_fn(policy: Any, mb: _Steps, hp: HParams, kl_beta: jax.Array):
        # mb leaves are `[n, T, G, ...]` for n groups.
        log_prob, entropy = grouped_log_prob(networks, policy, mb)
        surrogate, kl, ratio = grpo_loss_terms(
            log_prob,
            mb.log_prob,
            mb.ref_log_prob,
            mb.advantage,
            hp.clip_eps_low,
            hp.clip_eps_high,
            config.kl_estimator,
        )
        weight = group_loss_weights(mb.mask, config.group_normalizer)
        total = jnp.sum(weight * (surrogate + kl_beta * kl - hp.ent_coef * entropy))
        low, high = losses.clip_fractions(
            ratio, mb.advantage, hp.clip_eps_low, hp.clip_eps_high, mb.mask
        )
        aux = {
            "policy/loss": total,
            "policy/kl_ref": losses.masked_mean(kl, mb.alive),
            "policy/kl_old_new_k3": losses.masked_mean(
                losses.kl_estimate(log_prob - mb.log_prob, "k3"), mb.alive
            ),
            "policy/entropy": losses.masked_mean(entropy, mb.alive),
            "grpo/clip_frac_low": low,
            "grpo/clip_frac_high": high,
            "grpo/ratio_dev": jnp.max(jnp.abs(ratio - 1.0) * mb.alive),
        }
        return total, aux

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def update(params: Params, state: GRPOState, batch: GRPOBatch, hp: HParams, key: jax.Array):
        ref_policy = state.ref_policy
        if config.ref_refresh_every > 0:
            refresh = (state.updates > 0) & (state.updates % config.ref_refresh_every == 0)
            ref_policy = jax.tree.map(
                lambda new, old: jnp.where(refresh, new, old), params.policy, ref_policy
            )
        ref_log_prob = policy_on(networks, ref_policy, batch).log_prob(batch.action)
        b = batch
        head = (b.obs, b.action, b.log_prob, ref_log_prob, b.advantage, b.mask, b.alive)
        steps = _Steps(*head, b.group_id, b.first, b.memory, b.action_mask)
        lr = anneal(config, hp.learning_rate, state.updates)
        opt_state = set_learning_rate(state.opt_state, lr)

        (policy, opt_state), aux = minibatch_descent(
            grad_fn,
            optimizer,
            params.policy,
            opt_state,
            key,
            config.num_epochs,
            lambda k: group_minibatches(steps, k, g, config.num_minibatches),
            hp.max_grad_norm,
            hp,
            hp.kl_beta,
        )
        metrics = {k: v.mean() for k, v in aux.items() if k != "grpo/ratio_dev"}
        metrics["grpo/first_ratio_dev"] = aux["grpo/ratio_dev"][0, 0]
        metrics.update(batch_metrics(batch, g))
        metrics["grpo/learning_rate"] = lr
        metrics["grpo/kl_beta"] = hp.kl_beta
        new_state = GRPOState(opt_state, ref_policy, state.updates + 1)
        return Params(policy, params.value), new_state, metrics

    def check_env(env: Any) -> None:  # before tracing: a horizon shorter than an episode
        warn_short_horizon(env, config.num_steps)

    return Algorithm(
        init,
        make_batch,
        update,
        collect=make_grouped_collect(g),
        critic=False,
        check_env=check_env,
    )


def batch_metrics(batch: GRPOBatch, group_size: int) -> dict[str, jax.Array]:
    """Advantage and group statistics of a grouped batch (scalars)."""
    grouped = batch.outcome.reshape(-1, group_size)
    adv = batch.advantage
    return {
        "grpo/zero_std_frac": batch.zero_std.mean(),
        "grpo/adv_mean": losses.masked_mean(adv, batch.mask),
        "grpo/adv_std": jnp.sqrt(losses.masked_mean(adv**2, batch.mask)),
        "grpo/adv_abs_max": jnp.max(jnp.abs(adv)),
        "grpo/reward_mean": batch.outcome.mean(),
        "grpo/reward_group_std": grouped.std(axis=1).mean(),
        "grpo/steps_per_trajectory": batch.alive.sum(axis=0).mean(),
    }


SPEC = AlgorithmSpec.control(make_grpo, GRPOFields, GRPOHParams, memory=True)
