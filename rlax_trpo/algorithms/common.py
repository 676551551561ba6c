"""The toolbox every algorithm shares: optimiser, annealing, clipping, batches, critic fitting.

Algorithms import from here (and from the maths modules), never from each other. This is
also the memory seam: `BatchLayout` is the one place that knows whether the networks carry
a state, so an update written with it (and with `rlax_trpo.networks.policy_on` and
friends) runs the same with feed-forward networks and with memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from rlax_trpo import advantages as adv_lib
from rlax_trpo import losses
from rlax_trpo.config.configuration import Config
from rlax_trpo.config.fields import HParams
from rlax_trpo.errors import ConfigError
from rlax_trpo.memory import every_kth_environment
from rlax_trpo.networks import Networks, value_on, values_and_bootstrap
from rlax_trpo.schedules import linear_decay
from rlax_trpo.shuffle import Gathered, gathered_minibatches, gathered_sequences
from rlax_trpo.types import Batch, Params, Trajectory

# ---------------------------------------------------------------- optimiser


def make_optimizer(config: Config) -> optax.GradientTransformation:
    """Adam (eps `config.adam_eps`) or SGD, its learning rate in `inject_hyperparams` state,
    so it is a traced value that can be annealed and vmapped (`set_learning_rate`)."""
    if config.optimizer == "sgd":
        return optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)
    return optax.inject_hyperparams(optax.adam)(learning_rate=1.0, eps=config.adam_eps)


def set_learning_rate(opt_state: Any, learning_rate: jax.Array) -> Any:
    """Write the learning rate into an `optax.inject_hyperparams` state (vmappable hp)."""
    hyper = dict(opt_state.hyperparams)
    hyper["learning_rate"] = jnp.asarray(learning_rate, jnp.float32)
    return opt_state._replace(hyperparams=hyper)


def anneal(config: Config, learning_rate: jax.Array, updates: jax.Array) -> jax.Array:
    """Linear decay from `learning_rate` to 0 over the run when `config.anneal_lr`."""
    if not config.anneal_lr:
        return learning_rate
    return linear_decay(learning_rate, updates, config.num_iterations)


def clip_by_global_norm(grads: Any, max_norm: jax.Array) -> tuple[Any, jax.Array]:
    """Scale `grads` so their global norm is at most `max_norm`; also return the norm before.

    The rule of `optax.clip_by_global_norm`, with a traced (vmappable) `max_norm` and the
    pre-clipping norm kept for the `grad_norm` metric.
    """
    norm = optax.tree.norm(grads)
    scale = jnp.where(norm < max_norm, 1.0, max_norm / jnp.maximum(norm, 1e-12))
    return jax.tree.map(lambda g: g * scale, grads), norm


def optimizer_step(
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    grads: Any,
    max_grad_norm: jax.Array,
) -> tuple[Any, Any, jax.Array]:
    """Clip `grads` by global norm, apply one step of `optimizer` (Adam or SGD,
    `make_optimizer`): (params, opt_state, norm before clipping)."""
    grads, norm = clip_by_global_norm(grads, max_grad_norm)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, norm


def flat_optimizer_step(
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    grads: Any,
    max_grad_norm: jax.Array,
) -> tuple[Any, Any, jax.Array]:
    """`optimizer_step` on the flat vector (`opt_state` is of `ravel_pytree(params)[0]`),
    the parameters kept as a pytree: the optimiser is a few kernels, not a few per leaf (a
    quarter of PPO's update on CPU), and the networks read whole arrays, not slices of one
    vector (an H100 trace of PPO's update showed one extra pass over every hidden activation
    per minibatch with slices: studies/kernel_counts). Same arithmetic as on the flat vector.
    """
    flat_params, unravel = ravel_pytree(params)
    flat_grads = ravel_pytree(grads)[0]
    flat, opt_state, norm = optimizer_step(
        optimizer, flat_params, opt_state, flat_grads, max_grad_norm
    )
    return unravel(flat), opt_state, norm


# ---------------------------------------------------------------- batches


def flatten_batch(batch: Any, env_major: bool = False) -> Any:
    """`[T, B, ...]` -> `[T * B, ...]` on every leaf (time-major), or `[B * T, ...]`
    (env-major: each environment's steps contiguous, so a batch split over devices along
    its environment axis stays split)."""
    if env_major:
        batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)


def minibatches(batch: Any, key: jax.Array, num_minibatches: int, groups: int = 1) -> Any:
    """Shuffle a batch along its leading axis `[N, ...]` and split every leaf into
    `[num_minibatches, N / num_minibatches, ...]`: every minibatch of
    `shuffle.gathered_minibatches` (which says how `groups > 1` shuffles each block on its
    own, so a batch split over devices along its blocks is shuffled without communication),
    stacked."""
    mbs = gathered_minibatches(batch, key, num_minibatches, groups)
    return jax.vmap(mbs.take)(mbs.index)


def sequence_minibatches(batch: Any, key: jax.Array, num_minibatches: int) -> Any:
    """A memory batch (`[T, B, ...]` steps, `memory` `[B, ...]`) as minibatches of whole
    environment sequences: every leaf `[M, T, B / M, ...]`, `memory` `[M, B / M, ...]`."""
    mbs = gathered_sequences(batch, key, num_minibatches)
    return jax.vmap(mbs.take)(mbs.index)


def every_kth(fraction: float) -> int:
    """The stride k = round(1 / fraction) of a subsample that keeps `fraction` of a batch."""
    return max(1, round(1.0 / fraction))


class BatchLayout(NamedTuple):
    """How an update reads the rollout's `[T, B]` batch: samples, or whole sequences.

    Feed-forward networks read samples: the learner's batch is flattened to `[N, ...]`
    (time-major, or env-major with `shuffle: per_env`), a minibatch is shuffled samples and
    a subsample is every k-th sample. Networks with memory read whole sequences: the
    learner's batch stays `[T, B]` with its start memory, a minibatch is whole environments
    and a subsample every k-th environment's sequence (time order is never cut). Built once
    by `batch_layout`; `rlax_trpo.networks.policy_on`/`value_on` read either kind.
    """

    sequences: bool  # the networks have memory
    env_major: bool  # flattened env-major (`shuffle: per_env`)
    groups: int  # blocks shuffled apart (`minibatches`)

    def learner(self, batch: Any) -> Any:
        """The batch an update reads: `[N, ...]` samples, or `[T, B]` sequences as they are."""
        return batch if self.sequences else flatten_batch(batch, self.env_major)

    def minibatches(self, batch: Any, key: jax.Array, num_minibatches: int) -> Any:
        """A learner batch shuffled and split into `num_minibatches` on a leading axis."""
        if self.sequences:
            return sequence_minibatches(batch, key, num_minibatches)
        return minibatches(batch, key, num_minibatches, self.groups)

    def gathered(self, batch: Any, key: jax.Array, num_minibatches: int) -> Gathered:
        """The same minibatches as `minibatches`, as indices gathered one minibatch at a time
        inside `epochs_of_minibatches` (the learner batch is held in one layout only)."""
        if self.sequences:
            return gathered_sequences(batch, key, num_minibatches)
        return gathered_minibatches(batch, key, num_minibatches, self.groups)

    def subsample(self, batch: Any, fraction: float) -> Any:
        """Every k-th sample of a learner batch (k = `every_kth(fraction)`), or every k-th
        environment's whole sequence with its start memory (baselines' trpo_mpi takes every
        5th sample for the Fisher-vector product)."""
        if not self.sequences:
            stride = every_kth(fraction)
            return jax.tree.map(lambda x: x[::stride], batch)
        steps, starts = every_kth_environment(batch._replace(memory=None), batch.memory, fraction)
        return steps._replace(memory=starts)


def batch_layout(config: Config, networks: Networks, **minibatch_counts: int) -> BatchLayout:
    """The `BatchLayout` of `config` and `networks`, its minibatch counts checked (each given
    by its field's name, e.g. `num_minibatches=4`; one-line ConfigErrors).

    `shuffle: batch` (the default): time-major, one shuffle of the whole batch.
    `shuffle: per_env`: env-major, each environment's steps shuffled on their own, so
    `--shard envs` runs the update without gathering the trajectory; each minibatch count
    must divide `num_steps`. With memory a minibatch holds whole environments: each count
    must divide `num_envs`.
    """
    for field, count in minibatch_counts.items():
        if networks.recurrent and config.num_envs % count:
            raise ConfigError(
                f"{field}: {count} does not divide num_envs = {config.num_envs}; with memory "
                "a minibatch holds whole environment sequences"
            )
    if config.shuffle == "batch":
        return BatchLayout(networks.recurrent, False, 1)
    for m in minibatch_counts.values():
        if config.num_steps % m:
            raise ConfigError(
                f"shuffle: per_env needs minibatch counts that divide num_steps = "
                f"{config.num_steps} (got {m})"
            )
    return BatchLayout(networks.recurrent, True, config.num_envs)


def epochs_of_minibatches(
    step: Callable[[Any, Any], tuple[Any, Any]],
    carry: Any,
    key: jax.Array,
    num_epochs: int,
    make_minibatches: Callable[[jax.Array], Any],
) -> tuple[Any, Any]:
    """`num_epochs` passes of `step` over freshly shuffled minibatches, as two nested scans.

    `make_minibatches(epoch_key)` returns the epoch's minibatches stacked on a leading axis,
    or a `Gathered` (their indices: each minibatch is gathered inside the loop);
    `step(carry, minibatch) -> (carry, aux)`. Returns the final carry and `aux` stacked
    `[num_epochs, num_minibatches, ...]`.
    """

    def epoch(carry, epoch_key):
        mbs = make_minibatches(epoch_key)
        if isinstance(mbs, Gathered):
            return jax.lax.scan(lambda c, idx: step(c, mbs.take(idx)), carry, mbs.index)
        return jax.lax.scan(step, carry, mbs)

    return jax.lax.scan(epoch, carry, jax.random.split(key, num_epochs))


def minibatch_descent(
    grad_fn: Callable[..., tuple[Any, dict]],
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    key: jax.Array,
    num_epochs: int,
    make_minibatches: Callable[[jax.Array], Any],
    max_grad_norm: jax.Array,
    *args: Any,
    flat: bool = False,
) -> tuple[tuple[Any, Any], dict]:
    """Epochs x shuffled minibatches of clipped optimiser steps on `grad_fn(params, minibatch,
    *args) -> (grads, aux)`. Returns `((params, opt_state), aux)`, every aux entry (and
    `grad_norm`, the norm before clipping) stacked `[num_epochs, num_minibatches]`. With
    `flat`, `opt_state` is of the flattened parameters (`flat_optimizer_step`)."""
    take_step = flat_optimizer_step if flat else optimizer_step

    def step(carry, mb):
        params, opt_state = carry
        grads, aux = grad_fn(params, mb, *args)
        params, opt_state, aux["grad_norm"] = take_step(
            optimizer, params, opt_state, grads, max_grad_norm
        )
        return (params, opt_state), aux

    return epochs_of_minibatches(step, (params, opt_state), key, num_epochs, make_minibatches)


# ---------------------------------------------------------------- advantages and the critic


def estimate_advantages(
    config: Config, traj: Trajectory, values: jax.Array, next_values: jax.Array, hp: HParams
) -> jax.Array:
    """The advantage estimator selected by `config.advantage` on a `[T, B]` rollout."""
    args = (traj.reward, values, next_values, traj.terminated, traj.truncated, hp.gamma)
    if config.advantage == "gae":
        return adv_lib.gae_from_env(*args, hp.gae_lambda)
    if config.advantage == "mc":
        return adv_lib.monte_carlo_from_env(*args)
    if config.advantage == "nstep":
        return adv_lib.n_step_from_env(*args, config.n_step)
    raise ValueError(f"unknown advantage estimator {config.advantage!r}")


def make_critic_batch(config: Config, networks: Networks) -> Callable[..., Batch]:
    """`make_batch` for methods with a critic: V(obs), V(final_obs), advantages, targets.

    Values are computed after the rollout in one batched call per array (cheaper than one
    call per step); `final_obs` is the pre-reset observation, so truncated steps bootstrap.
    """

    def make_batch(params: Params, traj: Trajectory, hp: HParams) -> Batch:
        values, next_values = values_and_bootstrap(networks, params.value, traj, traj.final_obs)
        advantages = estimate_advantages(config, traj, values, next_values, hp)
        targets = advantages + values
        return Batch(
            traj.obs,
            traj.action,
            traj.log_prob,
            advantages,
            targets,
            values,
            traj.first,
            traj.memory,
            traj.action_mask,
        )

    return make_batch


class CriticFitter(NamedTuple):
    """Adam regression of the critic on the batch's value targets, after the policy step."""

    init: Callable[[Any], Any]  # value_params -> opt_state
    # (value_params, opt_state, flat_batch, hp, key) -> (value_params, opt_state, mean loss)
    fit: Callable[..., tuple[Any, Any, jax.Array]]


def make_critic_fitter(config: Config, networks: Networks) -> CriticFitter:
    """`value_epochs` epochs of `value_minibatches` shuffled minibatches of Adam on
    0.5 mean (V(s) - R)^2 with learning rate `hp.value_learning_rate`."""
    if config.batch_size % config.value_minibatches:
        raise ConfigError(
            f"value_minibatches: {config.value_minibatches} does not divide the batch "
            f"num_envs x num_steps = {config.batch_size}"
        )
    optimizer = optax.inject_hyperparams(optax.adam)(learning_rate=1.0, eps=config.adam_eps)
    layout = batch_layout(config, networks, value_minibatches=config.value_minibatches)

    def loss_fn(value_params: Any, mb: Batch) -> jax.Array:
        return losses.value_loss(value_on(networks, value_params, mb), mb.target)

    def fit(value_params: Any, opt_state: Any, flat: Batch, hp: HParams, key: jax.Array):
        opt_state = set_learning_rate(opt_state, hp.value_learning_rate)

        def step(carry, mb):
            v_params, o_state = carry
            loss, grads = jax.value_and_grad(loss_fn)(v_params, mb)
            updates, o_state = optimizer.update(grads, o_state, v_params)
            return (optax.apply_updates(v_params, updates), o_state), loss

        (value_params, opt_state), loss = epochs_of_minibatches(
            step,
            (value_params, opt_state),
            key,
            config.value_epochs,
            lambda k: layout.gathered(flat, k, config.value_minibatches),
        )
        return value_params, opt_state, loss.mean()

    return CriticFitter(optimizer.init, fit)
