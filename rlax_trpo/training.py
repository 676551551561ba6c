"""`make_train(config) -> train(key, hp)`: a whole run as one pure function.

One iteration reads like the algorithm box of the papers:

    rollout -> normalise -> make_batch -> update -> metrics

and a run is a `lax.scan` of iterations. The pieces are also exposed separately
(`Trainer.init`, `Trainer.run`) so a long run can be executed in chunks and resumed; running
`run` twice for n iterations equals running it once for 2n (the carry holds everything).
No function here calls `jax.jit`: call sites do, e.g. `jax.jit(jax.vmap(train, (0, None)))`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo import pbt
from rlax_trpo.algorithms import make_algorithm
from rlax_trpo.algorithms.base import Algorithm
from rlax_trpo.config.configuration import Config
from rlax_trpo.config.fields import HParams
from rlax_trpo.envs import Env, make_env, without_action_mask
from rlax_trpo.envs.base import flatten_observations
from rlax_trpo.errors import ConfigError
from rlax_trpo.layers import BUILTIN_NETWORKS
from rlax_trpo.memory import Memory
from rlax_trpo.networks import Networks, make_networks, uses_cnn
from rlax_trpo.normalization import (
    RunningMeanStd,
    Statistics,
    normalize_trajectory,
    observation_transform,
)
from rlax_trpo.platform import finish_computations_at_exit
from rlax_trpo.rollout import (
    EnvCarry,
    PolicyFn,
    RolloutResult,
    collect,
    fresh_episodes,
    reset_envs,
)
from rlax_trpo.types import Metrics, Params, TrainState

ProgressFn = Callable[[jax.Array, jax.Array], None]
PBT_STREAM = 0x9B7  # folded into a member's key for its PBT carry (other draws unchanged)


class Trainer(NamedTuple):
    """Everything `make_trainer` builds; all functions are pure and unjitted."""

    init: Callable[[jax.Array, HParams], TrainState]
    iteration: Callable[[TrainState, HParams], tuple[TrainState, Metrics]]
    run: Callable[[TrainState, HParams, int], tuple[TrainState, Metrics]]
    train: Callable[[jax.Array, HParams], tuple[TrainState, Metrics]]
    env: Env
    networks: Networks
    algorithm: Algorithm
    config: Config
    steps_per_iteration: int  # env steps of one iteration: the rollout's and any extra
    num_iterations: int  # of a whole run: total_env_steps // steps_per_iteration


def make_trainer(config: Config, progress: ProgressFn | None = None) -> Trainer:
    """Build env, networks and algorithm for `config` (host side, before any tracing).

    Args:
      config: the static configuration.
      progress: optional host function `progress(iteration, latest_return)` called once per
        iteration from inside the compiled run (`jax.debug.callback`; under `vmap` it is
        called once per seed). This is the only host interaction inside the scan.
    """
    finish_computations_at_exit()  # a script may end while its run is computed
    env = make_env(config.env, config.env_kwargs, flatten=False)
    if not config.mask_actions:
        env = without_action_mask(env)
    if config.network in BUILTIN_NETWORKS and not uses_cnn(config, env.spec):
        # an MLP reads images and matrices as vectors; a registered network, as they come
        env = flatten_observations(env)
    networks = make_networks(config, env.spec)
    algorithm = make_algorithm(config, networks)
    if algorithm.check_env is not None:
        algorithm.check_env(env)
    rollout = algorithm.collect or collect
    if config.reset_ratio > 1:
        if algorithm.collect is not None:
            raise ConfigError(
                f"reset_ratio: {config.algorithm} collects its own rollouts "
                "(grouped or vine); use reset_ratio=1"
            )
        if env.transition is None:
            raise ConfigError(
                f"reset_ratio: {config.env} gives no step without reset (Env.transition); "
                "use reset_ratio=1"
            )
        rollout = functools.partial(collect, reset_ratio=config.reset_ratio)
    pbt_settings = config.pbt.settings() if config.pbt is not None else None

    def init(key: jax.Array, hp: HParams) -> TrainState:
        k_params, k_env, k_run = jax.random.split(key, 3)
        carry = None
        if config.pbt is not None:  # the member's own hyperparameters, drawn or configured
            k_pbt = jax.random.fold_in(key, PBT_STREAM)
            carry = pbt.initial_carry(k_pbt, hp, pbt_settings, config.pbt.init == "prior")
            hp = carry.hparams
        params = networks.init(k_params)
        if not algorithm.critic:  # the policy's draw is the same either way
            params = params._replace(value=None)
        obs, env_state = reset_envs(env, k_env, config.num_envs)
        return TrainState(
            params=params,
            algo_state=algorithm.init(params, hp),
            env_state=env_state,
            obs=obs,
            episode=fresh_episodes(config.num_envs),
            obs_stats=RunningMeanStd.create(env.spec.obs_shape),
            return_stats=RunningMeanStd.create(),
            return_acc=jnp.zeros((config.num_envs,)),
            key=k_run,
            iteration=jnp.zeros((), jnp.int32),
            last_return=jnp.full((), jnp.nan),
            diverged_at=jnp.full((), -1, jnp.int32),
            memory=_initial_memory(networks, algorithm, config.num_envs),
            first=jnp.ones((config.num_envs,), bool) if networks.recurrent else None,
            pbt=carry,
        )

    def iteration(state: TrainState, hp: HParams) -> tuple[TrainState, Metrics]:
        key, k_rollout, k_update = jax.random.split(state.key, 3)
        transform = observation_transform(config.normalize_obs, state.obs_stats)
        policy = acting_policy(networks, state.params, transform)
        start = EnvCarry(state.env_state, state.obs, state.episode, state.memory, state.first)
        ro = rollout(env, policy, start, k_rollout, config.num_steps)
        stats = Statistics(state.obs_stats, state.return_stats, state.return_acc)
        traj, stats = normalize_trajectory(config, stats, ro.trajectory, ro.done, hp.gamma)

        batch = algorithm.make_batch(state.params, traj, hp)
        update = algorithm.update(state.params, state.algo_state, batch, hp, k_update)
        params, algo_state, diverged_at, finite = guard_divergence(state, update, traj.reward)
        metrics = {k: jnp.asarray(v, jnp.float32) for k, v in update[2].items()}
        last_return, episode_metrics = episode_metrics_of(ro, state.last_return)
        metrics.update(episode_metrics)
        metrics["train/reward"] = traj.reward.mean()
        metrics["train/finite"] = finite.astype(jnp.float32)
        if progress is not None:
            jax.debug.callback(progress, state.iteration, last_return)
        new_state = state.replace(
            params=params,
            algo_state=algo_state,
            env_state=ro.carry.env_state,
            obs=ro.carry.obs,
            episode=ro.carry.episode,
            obs_stats=stats.obs,
            return_stats=stats.returns,
            return_acc=stats.return_acc,
            key=key,
            iteration=state.iteration + 1,
            last_return=last_return,
            diverged_at=diverged_at,
            memory=ro.carry.memory,
            first=ro.carry.first,
        )
        return new_state, metrics

    def run(state: TrainState, hp: HParams, num_iterations: int):
        return jax.lax.scan(lambda s, _: iteration(s, hp), state, None, length=num_iterations)

    steps_per_iteration = config.batch_size + algorithm.extra_env_steps
    num_iterations = config.total_env_steps // steps_per_iteration

    def train(key: jax.Array, hp: HParams):
        return run(init(key, hp), hp, num_iterations)

    return Trainer(
        init,
        iteration,
        run,
        train,
        env,
        networks,
        algorithm,
        config,
        steps_per_iteration,
        num_iterations,
    )


def make_train(config: Config, progress: ProgressFn | None = None):
    """The pure function `train(key, hp) -> (TrainState, metrics)` of a whole run.

    `metrics` maps each name to an array `[num_iterations]` (one value per iteration).
    Vmap over keys for seeds and over `hp` leaves for hyperparameters.
    """
    return make_trainer(config, progress).train


def guard_divergence(
    state: TrainState, update: tuple[Params, Any, Metrics], reward: jax.Array
) -> tuple[Params, Any, jax.Array, jax.Array]:
    """The divergence guard: `(params, algo_state, diverged_at, finite)` after `update`.

    A non-finite update (parameters, or the figures it was computed from) is not applied,
    and none after it: a diverged member keeps its last finite parameters and records the
    iteration where it diverged, while the other members of a population go on.
    """
    params, algo_state, metrics = update
    finite = _all_finite(params) & _all_finite((metrics, reward))
    healthy = state.diverged_at < 0
    apply = finite & healthy
    keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(apply, n, o), new, old)
    diverged_at = jnp.where(healthy & ~finite, state.iteration, state.diverged_at)
    return keep(params, state.params), keep(algo_state, state.algo_state), diverged_at, finite


def episode_metrics_of(ro: RolloutResult, last_return: jax.Array) -> tuple[jax.Array, Metrics]:
    """(the latest mean return, carried when no episode finished; the `episode/` metrics) of
    the episodes that finished during a rollout, the environment's own figures included."""
    count = ro.done.sum()
    mean_return = ro.finished_return.sum() / jnp.maximum(count, 1)
    last_return = jnp.where(count > 0, mean_return, last_return)
    metrics = {
        "episode/return": last_return,
        "episode/count": count.astype(jnp.float32),
        "episode/return_sum": ro.finished_return.sum(),
        "episode/length": ro.finished_length.sum() / jnp.maximum(count, 1),
    }
    for name, total in (ro.episode_info or {}).items():
        metrics[f"episode/{name}_sum"] = jnp.asarray(total, jnp.float32)
    return last_return, metrics


def acting_policy(networks: Networks, params: Params, transform: Callable) -> PolicyFn:
    """The rollout's policy function for `params` (`rollout.PolicyFn`): observations through
    `transform`, then the policy; with memory, both networks' memories advanced."""
    if networks.memory is None:
        return lambda obs: networks.policy(params.policy, transform(obs))
    fns = networks.memory

    def policy(memory: Memory, obs: jax.Array, first: jax.Array):
        obs = transform(obs)
        pi_memory, dist = fns.policy_step(params.policy, memory.policy, obs, first)
        v_memory = memory.value
        if v_memory is not None:  # the critic's memory follows the same steps
            v_memory, _ = fns.value_step(params.value, v_memory, obs, first)
        return Memory(pi_memory, v_memory), dist

    return policy


def _initial_memory(networks: Networks, algorithm: Algorithm, num_envs: int) -> Memory | None:
    if networks.memory is None:
        return None
    memory = networks.memory.initial(num_envs)
    return memory if algorithm.critic else memory._replace(value=None)


def _all_finite(tree) -> jax.Array:
    leaves = [
        jnp.isfinite(x).all()
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    return jnp.stack(leaves).all() if leaves else jnp.asarray(True)
