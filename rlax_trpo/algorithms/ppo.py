"""PPO (Schulman et al. 2017) with the implementation details of Huang et al. (2022).

Epochs x shuffled minibatches over the flattened rollout; per-minibatch advantage
normalisation; optional value clipping; entropy bonus; global gradient-norm clipping; Adam
(eps 1e-5) with the learning rate in `inject_hyperparams` state, annealed linearly.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from pydantic import Field, model_validator

from rlax_trpo import losses
from rlax_trpo.algorithms.base import Algorithm, AlgorithmSpec
from rlax_trpo.algorithms.common import (
    anneal,
    batch_layout,
    linear_decay,
    make_critic_batch,
    make_optimizer,
    minibatch_descent,
    set_learning_rate,
)
from rlax_trpo.algorithms.sections import (
    AdvantageFields,
    AdvantageHParams,
    MinibatchFields,
    OptimizerFields,
    OptimizerHParams,
)
from rlax_trpo.config.configuration import Config
from rlax_trpo.config.fields import HParams, hp_field, read_with
from rlax_trpo.networks import Networks, policy_and_value_on, policy_on
from rlax_trpo.types import Batch, Params


class PPOFields(OptimizerFields, AdvantageFields, MinibatchFields):
    """PPO's static fields (defaults: RL Zoo's tuned CartPole-v1 settings, the default run)."""

    num_epochs: int = Field(20, gt=0)
    num_minibatches: int = Field(1, gt=0)
    clip_value_loss: bool = False
    penalty: Literal["clip", "kl_fixed", "kl_adaptive"] = "clip"  # PPO paper, sec. 3 / 4
    anneal_ent_coef: bool = False  # hp.ent_coef decays linearly to 0 over the run

    read_only_with = {
        "hp.value_clip_eps": read_with("clip_value_loss", True),
        "hp.kl_beta": read_with("penalty", "kl_fixed", "kl_adaptive"),
        "hp.kl_target": read_with("penalty", "kl_adaptive"),
    }

    @model_validator(mode="after")
    def _minibatches_divide_the_batch(self) -> PPOFields:
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ValueError(
                f"num_minibatches: {self.num_minibatches} does not divide the batch "
                f"num_envs x num_steps = {batch}; use a divisor of {batch}"
            )
        return self


@flax.struct.dataclass
class PPOHParams(OptimizerHParams, AdvantageHParams):
    """PPO's hyperparameters (defaults: RL Zoo's CartPole-v1 at learning rate 5e-4)."""

    gamma: Any = hp_field(0.98, ge=0, le=1)
    learning_rate: Any = hp_field(5e-4, gt=0)
    gae_lambda: Any = hp_field(0.8, ge=0, le=1)
    clip_eps: Any = hp_field(0.2, gt=0)
    ent_coef: Any = hp_field(0.0, ge=0)
    vf_coef: Any = hp_field(0.5, ge=0)
    value_clip_eps: Any = hp_field(0.2, gt=0)  # with clip_value_loss
    kl_beta: Any = hp_field(1.0, ge=0)  # initial penalty coefficient (kl_fixed, kl_adaptive)
    kl_target: Any = hp_field(0.01, gt=0)  # d_targ of kl_adaptive


class PPOState(NamedTuple):
    opt_state: Any
    updates: jax.Array  # number of update calls so far (for learning-rate annealing)
    kl_beta: jax.Array  # KL penalty coefficient (used by the kl_* penalty forms)


def make_ppo(config: Config, networks: Networks) -> Algorithm:
    """PPO: `num_epochs` passes over `num_minibatches` shuffled minibatches of the rollout,
    minimising the clipped surrogate (or the KL-penalised one of `penalty: kl_fixed |
    kl_adaptive`, PPO paper sec. 4) + c_v (V - R)^2 - c_H H with one optimiser for both
    networks; with `kl_adaptive`, beta follows the measured KL after each update."""
    optimizer = make_optimizer(config)
    layout = batch_layout(config, networks, num_minibatches=config.num_minibatches)

    # Adam and the gradient clipping run on one flat parameter vector (`flat_optimizer_step`:
    # fewer tiny kernels on CPU); the networks read the parameters as separate arrays.
    def init(params: Params, hp: HParams) -> PPOState:
        flat_params, _ = ravel_pytree(params)
        return PPOState(optimizer.init(flat_params), jnp.zeros((), jnp.int32), hp.kl_beta)

    def loss_fn(params: Params, mb: Batch, hp: HParams, kl_beta: jax.Array):
        dist, values = policy_and_value_on(networks, params, mb)
        log_prob = dist.log_prob(mb.action)
        log_ratio = log_prob - mb.log_prob
        ratio = jnp.exp(log_ratio)
        adv = losses.normalize(mb.advantage) if config.normalize_advantages else mb.advantage
        approx_kl = losses.kl_estimate(log_ratio, "k3").mean()  # KL(old || new), k3
        if config.penalty == "clip":
            pg_loss = losses.clipped_surrogate_loss(ratio, adv, hp.clip_eps)
        else:  # kl_fixed / kl_adaptive: -(r A) + beta KL(old || new)   (PPO paper, sec. 4)
            pg_loss = -(ratio * jax.lax.stop_gradient(adv)).mean() + kl_beta * approx_kl
        v_loss = losses.value_loss(
            values, mb.target, mb.value if config.clip_value_loss else None, hp.value_clip_eps
        )
        entropy = dist.entropy().mean()
        total = pg_loss + hp.vf_coef * v_loss - hp.ent_coef * entropy
        aux = {
            "policy/loss": pg_loss,
            "value/loss": v_loss,
            "policy/entropy": entropy,
            "policy/kl_old_new_k3": approx_kl,
            "ppo/clip_frac": (jnp.abs(ratio - 1.0) > hp.clip_eps).mean(),
            "ppo/ratio_dev": jnp.abs(ratio - 1.0).max(),
        }
        return total, aux

    def update(params: Params, state: PPOState, batch: Batch, hp: HParams, key: jax.Array):
        lr = anneal(config, hp.learning_rate, state.updates)
        opt_state = set_learning_rate(state.opt_state, lr)
        if config.anneal_ent_coef:  # as the learning rate, by the updates so far
            ent_coef = linear_decay(hp.ent_coef, state.updates, config.num_iterations)
            hp = hp.replace(ent_coef=ent_coef)
        flat = layout.learner(batch)
        split = lambda k: layout.gathered(flat, k, config.num_minibatches)
        (new_params, opt_state), aux = minibatch_descent(
            jax.grad(loss_fn, has_aux=True),
            optimizer,
            params,
            opt_state,
            key,
            config.num_epochs,
            split,
            hp.max_grad_norm,
            hp,
            state.kl_beta,
            flat=True,
        )
        metrics = {k: v.mean() for k, v in aux.items() if k != "ppo/ratio_dev"}
        # The first minibatch of the first epoch sees the rollout policy: ratio must be 1.
        metrics["ppo/first_ratio_dev"] = aux["ppo/ratio_dev"][0, 0]
        metrics["ppo/first_clip_frac"] = aux["ppo/clip_frac"][0, 0]
        metrics["ppo/learning_rate"] = lr

        kl_beta = state.kl_beta
        if config.penalty != "clip":
            # Measured after the whole update: d = mean KL(pi_old || pi_new) on the batch.
            new_logp = policy_on(networks, new_params.policy, flat).log_prob(flat.action)
            d = losses.kl_estimate(new_logp - flat.log_prob, "k3").mean()
            if config.penalty == "kl_adaptive":
                kl_beta = adapt_kl_beta(kl_beta, d, hp.kl_target)
            metrics["ppo/kl_after_update"] = d
            metrics["ppo/kl_beta"] = kl_beta
        return new_params, PPOState(opt_state, state.updates + 1, kl_beta), metrics

    return Algorithm(init, make_critic_batch(config, networks), update)


def adapt_kl_beta(beta: jax.Array, kl: jax.Array, kl_target: jax.Array) -> jax.Array:
    """PPO paper, sec. 4: halve beta if d < d_targ / 1.5, double it if d > 1.5 d_targ."""
    beta = jnp.where(kl < kl_target / 1.5, beta / 2.0, beta)
    return jnp.where(kl > kl_target * 1.5, beta * 2.0, beta)


SPEC = AlgorithmSpec.control(make_ppo, PPOFields, PPOHParams, memory=True)
