"""Vanilla policy gradient: REINFORCE with a learned value baseline (Williams 1992; Sutton et al.
2000), as in Spinning Up's VPG.

One update per batch:

    A <- advantages (GAE, n-step or Monte Carlo against the critic), normalised (optional)
    policy: one full-batch Adam step on -mean(log pi(a|s) A) - c_H mean H(pi(.|s)),
            gradient norm clipped at `max_grad_norm`, learning rate annealed if `anneal_lr`
    critic: `value_epochs` x `value_minibatches` Adam steps on 0.5 (V - R)^2 (separate network)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp

from rlax_trpo import losses
from rlax_trpo.algorithms.base import Algorithm, AlgorithmSpec
from rlax_trpo.algorithms.common import (
    anneal,
    batch_layout,
    make_critic_batch,
    make_critic_fitter,
    make_optimizer,
    optimizer_step,
    set_learning_rate,
)
from rlax_trpo.algorithms.sections import (
    AdvantageFields,
    AdvantageHParams,
    CriticFitterFields,
    CriticFitterHParams,
    OptimizerFields,
    OptimizerHParams,
)
from rlax_trpo.config.configuration import Config
from rlax_trpo.config.fields import HParams, hp_field
from rlax_trpo.networks import Networks, policy_on
from rlax_trpo.types import Batch, Params


class VPGFields(OptimizerFields, AdvantageFields, CriticFitterFields):
    """VPG's static fields: the policy optimiser, the advantage estimator, the critic fit."""


@flax.struct.dataclass
class VPGHParams(OptimizerHParams, AdvantageHParams, CriticFitterHParams):
    ent_coef: Any = hp_field(0.01, ge=0)


class VPGState(NamedTuple):
    opt_state: Any  # policy optimiser state
    value_opt_state: Any  # critic optimiser state
    updates: jax.Array  # number of updates so far (learning-rate annealing)


def make_vpg(config: Config, networks: Networks) -> Algorithm:
    """VPG: one full-batch step of the policy on -mean(log pi(a|s) A) - c_H H, then the
    critic's fit (module docstring)."""
    optimizer = make_optimizer(config)
    critic = make_critic_fitter(config, networks)
    layout = batch_layout(config, networks, value_minibatches=config.value_minibatches)

    def init(params: Params, hp: HParams) -> VPGState:
        return VPGState(
            optimizer.init(params.policy), critic.init(params.value), jnp.zeros((), jnp.int32)
        )

    def loss_fn(policy_params: Any, flat: Batch, advantages: jax.Array, hp: HParams):
        dist = policy_on(networks, policy_params, flat)
        log_prob = dist.log_prob(flat.action)
        pg_loss = losses.policy_gradient_loss(log_prob, advantages)
        entropy = dist.entropy().mean()
        # k3 estimate of KL(old || new) is 0 here; it is measured after the step below.
        return pg_loss - hp.ent_coef * entropy, {"policy/loss": pg_loss, "policy/entropy": entropy}

    def update(params: Params, state: VPGState, batch: Batch, hp: HParams, key: jax.Array):
        flat = layout.learner(batch)
        adv = losses.normalize(flat.advantage) if config.normalize_advantages else flat.advantage
        grads, metrics = jax.grad(loss_fn, has_aux=True)(params.policy, flat, adv, hp)
        lr = anneal(config, hp.learning_rate, state.updates)
        opt_state = set_learning_rate(state.opt_state, lr)
        policy, opt_state, metrics["grad_norm"] = optimizer_step(
            optimizer, params.policy, opt_state, grads, hp.max_grad_norm
        )

        old_dist = policy_on(networks, params.policy, flat)  # exact KL(old || new) of the step
        new_dist = policy_on(networks, policy, flat)
        metrics["policy/kl_old_new"] = old_dist.kl_divergence(new_dist).mean()
        metrics["policy/learning_rate"] = lr
        value, value_opt_state, value_loss = critic.fit(
            params.value, state.value_opt_state, flat, hp, key
        )
        metrics["value/loss"] = value_loss
        new_state = VPGState(opt_state, value_opt_state, state.updates + 1)
        return Params(policy, value), new_state, metrics

    return Algorithm(init, make_critic_batch(config, networks), update)


SPEC = AlgorithmSpec.control(make_vpg, VPGFields, VPGHParams, memory=True)
