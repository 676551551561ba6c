"""The `Algorithm` interface, and the batch construction shared by the critic-based methods.

Every method is a NamedTuple of pure functions built by a `make_*` factory (optax's
`GradientTransformation` idea); the training loop does not know which one it runs:

    algo_state = algorithm.init(params, hp)
    batch = algorithm.make_batch(params, trajectory, hp)
    params, algo_state, metrics = algorithm.update(params, algo_state, batch, hp, key)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo import advantages as adv_lib
from rlax_trpo import shuffle
from rlax_trpo.config import Config, HParams
from rlax_trpo.networks import Networks
from rlax_trpo.types import Batch, Metrics, Params, Trajectory


class Algorithm(NamedTuple):
    init: Callable[[Params, HParams], Any]
    make_batch: Callable[[Params, Trajectory, HParams], Batch]
    update: Callable[[Params, Any, Batch, HParams, jax.Array], tuple[Params, Any, Metrics]]
    # Optional rollout with `rollout.collect`'s signature (e.g. GRPO's grouped collection);
    # None means the standard continuing rollout.
    collect: Callable[..., Any] | None = None


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
        values = networks.value(params.value, traj.obs)
        next_values = networks.value(params.value, traj.final_obs)
        advantages = estimate_advantages(config, traj, values, next_values, hp)
        targets = advantages + values
        return Batch(traj.obs, traj.action, traj.log_prob, advantages, targets, values)

    return make_batch


def flatten_batch(batch: Batch) -> Batch:
    """`[T, B, ...]` -> `[T * B, ...]`."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)


def minibatches(batch: Batch, key: jax.Array, num_minibatches: int) -> Batch:
    """Shuffle a flat batch `[N, ...]` and split it into `[num_minibatches, N / M, ...]`."""
    n = batch.obs.shape[0]
    perm = shuffle.permutation(key, n)
    return jax.tree.map(
        lambda x: jnp.take(x, perm, axis=0).reshape((num_minibatches, -1) + x.shape[1:]), batch
    )


def set_learning_rate(opt_state: Any, learning_rate: jax.Array) -> Any:
    """Write the learning rate into an `optax.inject_hyperparams` state (vmappable hp)."""
    hyper = dict(opt_state.hyperparams)
    hyper["learning_rate"] = jnp.asarray(learning_rate, jnp.float32)
    return opt_state._replace(hyperparams=hyper)
