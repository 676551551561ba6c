"""TRPO (Schulman et al. 2015) and the natural policy gradient (Kakade 2001), in the jitted loop.

One update, as in the paper's practical algorithm (App. C) and sb3-contrib's TRPO:

    A  <- advantages of the batch, normalised over the batch (optional)
    L(theta) = mean_n pi_theta(a_n|s_n) / pi_old(a_n|s_n) * A_n        surrogate
             + c mean_n H(pi_theta(.|s_n))        with an entropy bonus c = `hp.ent_coef` (0)
               (or -c mean_n KL(U || pi_theta(.|s_n)), `entropy_bonus: log_barrier`;
               c falls linearly to 0 over the run with `anneal_ent_coef`)
    g  = grad L(theta_old)
    s  = CG(F + d I, g)                    F: Hessian of mean KL(pi_old || pi_theta); jax.scipy's
                                           cg, <= cg_iters steps, to ||F s - g|| <= cg_tol ||g||
    step = sqrt(2 delta / s^T F s) * s    (or min(natural_lr, that) * s; delta: `anneal_max_kl`)
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
from rlax_trpo.algorithms import vine
from rlax_trpo.algorithms.base import Algorithm, AlgorithmSpec
from rlax_trpo.algorithms.common import (
    BatchLayout,
    batch_layout,
    every_kth,
    linear_decay,
    make_critic_batch,
    make_critic_fitter,
)
from rlax_trpo.algorithms.sections import (
    AdvantageFields,
    AdvantageHParams,
    CriticFitterFields,
    CriticFitterHParams,
)
from rlax_trpo.config.configuration import Config
from rlax_trpo.config.fields import HParams, hp_field, read_with
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import Networks, masked, policy_on
from rlax_trpo.types import Batch, Metrics, Params

VINE_FIELDS = ("vine_states", "vine_actions", "vine_horizon", "vine_bootstrap")


class NPGFields(AdvantageFields, CriticFitterFields):
    """The natural step's static fields (NPG; TRPO adds the line search), and the estimator
    of the surrogate: `single_path`, or `vine` (`rlax_trpo.algorithms.vine`: `vine_states` states of
    the rollout, `vine_actions` branches each (0: every action of a discrete space), rolled
    out `vine_horizon` steps, bootstrapped by the critic unless `vine_bootstrap` is off)."""

    cg_iters: int = Field(10, gt=0)
    cg_solver: Literal["jax", "scan"] = "jax"  # jax.scipy's cg, or exactly cg_iters steps
    fisher_fraction: float = Field(1.0, gt=0, le=1)  # Fisher-vector products on every k-th
    sampling: Literal["single_path", "vine"] = "single_path"
    vine_states: int = Field(64, gt=0)
    vine_actions: int = Field(0, ge=0)
    vine_horizon: int = Field(32, gt=0)
    vine_bootstrap: bool = True
    entropy_bonus: Literal["entropy", "log_barrier"] = "entropy"  # what hp.ent_coef weighs
    anneal_ent_coef: bool = False  # hp.ent_coef decays linearly to 0 over the run
    anneal_max_kl: bool = False  # hp.max_kl (the trust region's radius) too
    anneal_value_lr: bool = False  # hp.value_learning_rate (the critic's Adam) too

    # a changed value without its condition is refused; defaults (as every saved config.yaml
    # holds them) are not
    read_only_with = {
        **dict.fromkeys(VINE_FIELDS, read_with("sampling", "vine")),
        "hp.cg_tol": read_with("cg_solver", "jax"),  # the scan solver runs cg_iters steps
    }


class TRPOFields(NPGFields):
    line_search_steps: int = Field(10, gt=0)
    # candidates evaluated at once, batch by batch until one passes (0: all K at once)
    line_search_batch: int = Field(1, ge=0)


@flax.struct.dataclass
class NPGHParams(AdvantageHParams, CriticFitterHParams):
    max_kl: Any = hp_field(0.01, gt=0)  # delta: 1/2 s^T F s = max_kl
    damping: Any = hp_field(0.1, ge=0)
    cg_tol: Any = hp_field(1e-5, ge=0)  # CG stops at ||F s - g|| <= cg_tol ||g||
    ent_coef: Any = hp_field(0.0, ge=0)  # c: the step increases L(theta) + c H(pi_theta)
    natural_lr: Any = hp_field(0.0, ge=0)  # > 0: step min(natural_lr, alpha) F^-1 g (ACKTR)


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


def with_entropy_bonus(surrogate: Any, entropy: Any, ent_coef: jax.Array):
    """theta -> L(theta) + c H(pi_theta): the surrogate with an entropy bonus.

    The natural step follows its gradient g + c grad H through CG, and the line search
    accepts a candidate only if this whole objective improves (and the KL bound holds: the
    trust region is unchanged). `entropy(theta)` is the mean entropy over the batch's states;
    c = 0 (the default) is the plain surrogate.
    """
    return lambda params: surrogate(params) + ent_coef * entropy(params)


def annealed(config: Config, hp: HParams, critic_opt_state: Any) -> HParams:
    """`hp` with `ent_coef` (`anneal_ent_coef`), `max_kl` (`anneal_max_kl`) and
    `value_learning_rate` (`anneal_value_lr`) decayed linearly to 0 over the run, as PPO's
    `anneal_lr`. The iteration is read off the critic's optimiser, which takes
    `value_epochs x value_minibatches` steps an iteration: no counter in the state."""
    iteration = critic_opt_state.count // (config.value_epochs * config.value_minibatches)
    decay = lambda x: linear_decay(x, iteration, config.num_iterations)
    if config.anneal_ent_coef:
        hp = hp.replace(ent_coef=decay(hp.ent_coef))
    if config.anneal_max_kl:
        hp = hp.replace(max_kl=decay(hp.max_kl))
    if config.anneal_value_lr:
        hp = hp.replace(value_learning_rate=decay(hp.value_learning_rate))
    return hp


def policy_bonus(config: Config, networks: Networks) -> Any:
    """dist -> the per-state bonus `hp.ent_coef` weighs: H(pi(.|s)) (`entropy_bonus:
    entropy`) or the log barrier -KL(U || pi(.|s)) (`log_barrier`, `losses.log_barrier`),
    whose pull toward uniform does not vanish where pi(.|s) is deterministic, as the
    entropy's does (studies/trpo_minatar_settings: where Breakout's policy stays deterministic)."""
    if config.entropy_bonus == "entropy":
        return lambda dist: dist.entropy()
    if networks.spec is not None and not networks.spec.discrete:
        raise ConfigError(
            "entropy_bonus: log_barrier needs discrete actions (a uniform policy); "
            f"{getattr(config, 'env', 'this environment')}'s are continuous (use entropy)"
        )
    return lambda dist: losses.log_barrier(dist.logits, getattr(dist, "legal", None))


def kl_fn(
    networks: Networks, layout: BatchLayout, policy_params: Any, batch: Batch, fraction: float = 1.0
):
    """theta -> mean KL(pi_old || pi_theta) over `batch` (`tr.mean_kl_fn`), on the subsample
    `layout.subsample(batch, fraction)`: every k-th sample, or every k-th environment's whole
    sequence re-run from its start memory."""
    policy = lambda params, b: policy_on(networks, params, b)
    return tr.mean_kl_fn(policy, policy_params, layout.subsample(batch, fraction))


def trust_region_step(
    config: Config,
    surrogate: Any,
    fisher_kl: Any,
    batch_kl: Any,
    policy_params: Any,
    hp: HParams,
    line_search: bool,
) -> tuple[Any, Metrics]:
    """One natural step on `surrogate` (theta -> L(theta), to be increased) in the trust
    region of `batch_kl` (theta -> mean KL(pi_old || pi_theta)), the Fisher matrix being the
    Hessian of `fisher_kl`: CG, the scaled step, then (TRPO) the backtracking line search or
    (NPG) the step as it is. Any estimator of L fits: the single path's importance-sampled
    surrogate (`surrogate_fn`) or the vine's (`rlax_trpo.algorithms.vine`)."""
    surrogate_old, grad = jax.value_and_grad(surrogate)(policy_params)
    solve = (hp.max_kl, hp.damping, config.cg_iters, hp.cg_tol, config.cg_solver, hp.natural_lr)
    nat = tr.natural_step(fisher_kl, policy_params, grad, *solve)

    def evaluate(candidate: Any) -> tuple[jax.Array, jax.Array]:
        return surrogate(candidate) - surrogate_old, batch_kl(candidate)

    if line_search:
        fractions = tr.line_search_fractions(hp.line_search_decay, config.line_search_steps)
        search = (hp.max_kl, hp.kl_slack, config.line_search_batch)
        ls = tr.backtracking_line_search(evaluate, policy_params, nat.step, fractions, *search)
        new_policy, accepted, fraction = ls.params, ls.accepted, ls.fraction
        tried = jnp.where(accepted, ls.index + 1, config.line_search_steps)
        actual_improvement, kl = ls.improvement, ls.kl  # of the step applied (0: rejected)
    else:
        new_policy = tr.tree_axpy(1.0, nat.step, policy_params)
        accepted, fraction, tried = jnp.asarray(True), jnp.float32(1.0), jnp.int32(0)
        actual_improvement, kl = evaluate(new_policy)
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
        "policy/surrogate": surrogate_old,
    }
    return new_policy, metrics


def _make_trust_region_method(config: Config, networks: Networks, line_search: bool) -> Algorithm:
    critic = make_critic_fitter(config, networks)
    layout = batch_layout(config, networks, value_minibatches=config.value_minibatches)
    per_state_bonus = policy_bonus(config, networks)

    def init(params: Params, hp: HParams) -> TRPOState:
        return TRPOState(critic.init(params.value))

    def policy_step(policy_params: Any, flat: Batch, hp: HParams) -> tuple[Any, Metrics]:
        adv = flat.advantage
        adv = losses.normalize(adv) if config.normalize_advantages else adv
        adv = jax.lax.stop_gradient(adv)
        dist = lambda params: policy_on(networks, params, flat)
        bonus = lambda params: per_state_bonus(dist(params)).mean()
        new_policy, metrics = trust_region_step(
            config,
            with_entropy_bonus(surrogate_fn(networks, flat, adv), bonus, hp.ent_coef),
            kl_fn(networks, layout, policy_params, flat, config.fisher_fraction),
            kl_fn(networks, layout, policy_params, flat),
            policy_params,
            hp,
            line_search,
        )
        metrics["policy/entropy"] = dist(policy_params).entropy().mean()
        return new_policy, metrics

    def update(params: Params, state: TRPOState, batch: Batch, hp: HParams, key: jax.Array):
        flat = layout.learner(batch)
        hp = annealed(config, hp, state.value_opt_state)
        policy, metrics = policy_step(params.policy, flat, hp)
        value, value_opt_state, value_loss = critic.fit(
            params.value, state.value_opt_state, flat, hp, key
        )
        metrics["value/loss"] = value_loss
        return Params(policy, value), TRPOState(value_opt_state), metrics

    algorithm = Algorithm(init, make_critic_batch(config, networks), update)
    if config.sampling == "vine":
        return _with_vine(algorithm, config, networks, critic, layout, line_search)
    return algorithm


class VineBatch(NamedTuple):
    critic: Batch  # the single path's, for the critic
    branches: vine.Branches  # the rollout set, normalised as the trajectory
    q: jax.Array  # [S, K] Q(s_n, a_k) of every branch


def _with_vine(
    algorithm: Algorithm,
    config: Config,
    networks: Networks,
    critic: Any,
    layout: BatchLayout,
    line_search: bool,
) -> Algorithm:
    """`algorithm` with the vine estimator (`rlax_trpo.algorithms.vine`) in place of the
    single path's importance-sampled surrogate: same natural step, line search and critic
    fit."""
    plan = vine.plan_branches(config, networks)
    per_state_bonus = policy_bonus(config, networks)
    collect = vine.make_vine_collect(
        config.vine_states, plan.num_actions, config.vine_horizon, plan.every_action
    )

    def make_batch(params: Params, traj: vine.VineTrajectory, hp: HParams) -> VineBatch:
        batch = algorithm.make_batch(params, traj.path, hp)
        value_fn = (
            (lambda obs: networks.value(params.value, obs)) if config.vine_bootstrap else None
        )
        q = vine.branch_values(traj.branches, hp.gamma, value_fn)
        return VineBatch(batch, traj.branches, jax.lax.stop_gradient(q))

    def update(params: Params, state: TRPOState, batch: VineBatch, hp: HParams, key: jax.Array):
        hp = annealed(config, hp, state.value_opt_state)
        states = (batch.branches.obs, batch.branches.action_mask)  # the rollout set's
        stride = every_kth(config.fisher_fraction)
        sub = jax.tree.map(lambda x: x[::stride], states)
        policy = lambda params, s: masked(networks.policy(params, s[0]), s[1])
        entropy = lambda params: policy(params, states).entropy().mean()
        bonus = lambda params: per_state_bonus(policy(params, states)).mean()
        on_branches = lambda params, obs: policy(params, (obs, states[1]))
        surrogate = vine.vine_surrogate_fn(on_branches, batch.branches, batch.q, plan.every_action)
        new_policy, metrics = trust_region_step(
            config,
            with_entropy_bonus(surrogate, bonus, hp.ent_coef),
            tr.mean_kl_fn(policy, params.policy, sub),
            tr.mean_kl_fn(policy, params.policy, states),
            params.policy,
            hp,
            line_search,
        )
        flat = layout.learner(batch.critic)
        value, value_opt_state, value_loss = critic.fit(
            params.value, state.value_opt_state, flat, hp, key
        )
        metrics["value/loss"] = value_loss
        metrics["policy/entropy"] = entropy(params.policy)
        metrics["vine/q_mean"] = batch.q.mean()
        metrics["vine/q_spread"] = (batch.q.max(1) - batch.q.min(1)).mean()
        return Params(new_policy, value), TRPOState(value_opt_state), metrics

    return algorithm._replace(
        make_batch=make_batch,
        update=update,
        collect=collect,
        extra_env_steps=plan.extra_env_steps,
    )


def make_trpo(config: Config, networks: Networks) -> Algorithm:
    """TRPO: the scaled natural step with a backtracking line search on KL and surrogate."""
    return _make_trust_region_method(config, networks, line_search=True)


def make_npg(config: Config, networks: Networks) -> Algorithm:
    """Natural policy gradient: the step sqrt(2 delta / s^T F s) F^-1 g, always applied
    (Kakade 2001; the normalised form of Rajeswaran et al. 2017)."""
    return _make_trust_region_method(config, networks, line_search=False)


TRPO_SPEC = AlgorithmSpec.control(make_trpo, TRPOFields, TRPOHParams, memory=True)
NPG_SPEC = AlgorithmSpec.control(make_npg, NPGFields, NPGHParams, memory=True)
