"""TRPO (Schulman et al. 2015) and the natural policy gradient (Kakade 2001), in the jitted loop.

One update, as in the paper's practical algorithm (App. C) and sb3-contrib's TRPO:

    A  <- advantages of the batch, normalised over the batch (optional)
    L(theta) = mean_n pi_theta(a_n|s_n) / pi_old(a_n|s_n) * A_n        surrogate
    g  = grad L(theta_old)
    s  = CG(F + d I, g)                    F: Hessian of mean KL(pi_old || pi_theta); jax.scipy's
                                           cg, <= cg_iters steps, to ||F s - g|| <= cg_tol ||g||
    step = sqrt(2 delta / s^T F s) * s
    trpo: theta <- first of theta + beta^j step with KL <= slack delta and L gain > 0, else theta
    npg:  theta <- theta + step            (the scaled natural step, no line search)
    critic: `value_epochs` x `value_minibatches` Adam steps on 0.5 (V - R)^2

The natural step touches `params.policy` only; the critic is a separate network (no shared
torso, which would let the critic's update move the policy outside the trust region).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
from pydantic import Field

from rlax_trpo import losses
from rlax_trpo import trust_region as tr
from rlax_trpo.algorithms.base import Algorithm, AlgorithmSpec
from rlax_trpo.algorithms.common import (
    batch_layout,
    flatten_batch,
    make_critic_batch,
    make_critic_fitter,
)
from rlax_trpo.algorithms.sections import (
    AdvantageFields,
    AdvantageHParams,
    CriticFitterFields,
    CriticFitterHParams,
)
from rlax_trpo.config import Config, HParams, hp_field
from rlax_trpo.memory import every_kth_environment
from rlax_trpo.networks import Networks, policy_on
from rlax_trpo.types import Batch, Metrics, Params


class NPGFields(AdvantageFields, CriticFitterFields):
    """The natural step's static fields (NPG; TRPO adds the line search)."""

    cg_iters: int = Field(10, gt=0)
    cg_solver: Literal["jax", "scan"] = "jax"  # jax.scipy's cg, or exactly cg_iters steps
    fisher_fraction: float = Field(1.0, gt=0, le=1)  # Fisher-vector products on every k-th


class TRPOFields(NPGFields):
    line_search_steps: int = Field(10, gt=0)


@flax.struct.dataclass
class NPGHParams(AdvantageHParams, CriticFitterHParams):
    max_kl: Any = hp_field(0.01, gt=0)  # delta: 1/2 s^T F s = max_kl
    damping: Any = hp_field(0.1, ge=0)
    cg_tol: Any = hp_field(1e-5, ge=0)  # CG stops at ||F s - g|| <= cg_tol ||g||


@flax.struct.dataclass
class TRPOHParams(NPGHParams):
    line_search_decay: Any = hp_field(0.8, gt=0, lt=1)
    kl_slack: Any = hp_field(1.0, ge=1)  # accept KL <= kl_slack * max_kl


class TRPOState(NamedTuple):
    value_opt_state: Any  # Adam state of the critic (learning rate in inject_hyperparams)


def surrogate_fn(networks: Networks, flat: Batch, advantages: jax.Array):
    """theta -> L(theta) = mean_n exp(log pi_theta(a_n|s_n) - log pi_old(a_n|s_n)) A_n.

    The importance-sampled surrogate of Schulman et al. (2015), eq. 14; `flat` is `[N, ...]`
    and `advantages` `[N]` (already normalised if requested). Its gradient at theta_old is the
    policy gradient mean_n grad log pi(a_n|s_n) A_n.
    """

    def surrogate(policy_params: Any) -> jax.Array:
        log_prob = policy_on(networks, policy_params, flat).log_prob(flat.action)
        return (jnp.exp(log_prob - flat.log_prob) * advantages).mean()

    return surrogate


def fisher_subsample(obs: jax.Array, fraction: float) -> jax.Array:
    """Every k-th sample, k = round(1 / fraction), for the Fisher-vector product (baselines
    trpo_mpi uses every 5th); a static slice, so shapes stay fixed."""
    stride = max(1, round(1.0 / fraction))
    return obs[::stride]


def kl_fn(networks: Networks, policy_params: Any, batch: Batch, fraction: float = 1.0):
    """theta -> mean KL(pi_old || pi_theta) over `batch` (`tr.mean_kl_fn`), on every k-th
    sample (`fisher_subsample`), or with memory on every k-th environment's whole sequence
    re-run from its start memory."""
    if batch.memory is None:
        return tr.mean_kl_fn(networks.policy, policy_params, fisher_subsample(batch.obs, fraction))
    steps, starts = every_kth_environment(batch._replace(memory=None), batch.memory, fraction)
    steps = steps._replace(memory=starts)
    policy = lambda params, b: policy_on(networks, params, b)
    return tr.mean_kl_fn(policy, policy_params, steps)


def _make_trust_region_method(config: Config, networks: Networks, line_search: bool) -> Algorithm:
    critic = make_critic_fitter(config, networks)
    env_major, _ = batch_layout(config, config.value_minibatches)

    def init(params: Params, hp: HParams) -> TRPOState:
        return TRPOState(critic.init(params.value))

    def policy_step(policy_params: Any, flat: Batch, hp: HParams) -> tuple[Any, Metrics]:
        adv = flat.advantage
        adv = losses.normalize(adv) if config.normalize_advantages else adv
        adv = jax.lax.stop_gradient(adv)
        surrogate = surrogate_fn(networks, flat, adv)
        fisher_kl = kl_fn(networks, policy_params, flat, config.fisher_fraction)
        batch_kl = kl_fn(networks, policy_params, flat)

        surrogate_old, grad = jax.value_and_grad(surrogate)(policy_params)
        nat = tr.natural_step(
            fisher_kl,
            policy_params,
            grad,
            hp.max_kl,
            hp.damping,
            config.cg_iters,
            hp.cg_tol,
            config.cg_solver,
        )

        def evaluate(candidate: Any) -> tuple[jax.Array, jax.Array]:
            return surrogate(candidate) - surrogate_old, batch_kl(candidate)

        if line_search:
            fractions = tr.line_search_fractions(hp.line_search_decay, config.line_search_steps)
            ls = tr.backtracking_line_search(
                evaluate, policy_params, nat.step, fractions, hp.max_kl, hp.kl_slack
            )
            new_policy, accepted, fraction = ls.params, ls.accepted, ls.fraction
            tried = jnp.where(accepted, ls.index + 1, config.line_search_steps)
        else:
            new_policy = tr.tree_axpy(1.0, nat.step, policy_params)
            accepted, fraction, tried = jnp.asarray(True), jnp.float32(1.0), jnp.int32(0)

        # Realised quantities of the step actually applied (zero when it was rejected).
        actual_improvement, kl = evaluate(new_policy)
        entropy = policy_on(networks, policy_params, flat).entropy().mean()
        metrics = {
            "trpo/cg_residual": nat.cg_residual,
            "trpo/expected_improvement": fraction * nat.expected_improvement,
            "trpo/actual_improvement": actual_improvement,
            "trpo/kl": kl,
            "trpo/line_search_steps": tried.astype(jnp.float32),
            "trpo/accepted": accepted.astype(jnp.float32),
            "trpo/step_fraction": fraction,
            "trpo/quadratic_kl": nat.quadratic_kl,
            "trpo/grad_norm": nat.grad_norm,
            "policy/kl_old_new": kl,
            "policy/entropy": entropy,
            "policy/surrogate": surrogate_old,
        }
        return new_policy, metrics

    def update(params: Params, state: TRPOState, batch: Batch, hp: HParams, key: jax.Array):
        flat = batch if networks.recurrent else flatten_batch(batch, env_major)
        policy, metrics = policy_step(params.policy, flat, hp)
        value, value_opt_state, value_loss = critic.fit(
            params.value, state.value_opt_state, flat, hp, key
        )
        metrics["value/loss"] = value_loss
        return Params(policy, value), TRPOState(value_opt_state), metrics

    return Algorithm(init, make_critic_batch(config, networks), update)


def make_trpo(config: Config, networks: Networks) -> Algorithm:
    """TRPO: the scaled natural step with a backtracking line search on KL and surrogate."""
    return _make_trust_region_method(config, networks, line_search=True)


def make_npg(config: Config, networks: Networks) -> Algorithm:
    """Natural policy gradient: the step sqrt(2 delta / s^T F s) F^-1 g, always applied
    (Kakade 2001; the normalised form of Rajeswaran et al. 2017)."""
    return _make_trust_region_method(config, networks, line_search=False)


TRPO_SPEC = AlgorithmSpec.control(make_trpo, TRPOFields, TRPOHParams)
NPG_SPEC = AlgorithmSpec.control(make_npg, NPGFields, NPGHParams)
