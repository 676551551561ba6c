"""Records that flow between the rooms: NamedTuples for data, a struct dataclass for the carry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax

Metrics = dict[str, jax.Array]


class Params(NamedTuple):
    """Policy and critic parameters; `value` is None where there is no critic (GRPO)."""

    policy: Any
    value: Any


class Trajectory(NamedTuple):
    """A time-major rollout, every leaf `[T, B, ...]`.

    `final_obs[t]` is the observation reached by step t before any automatic reset, so
    `V(final_obs[t])` bootstraps truncated steps and the rollout end. An algorithm that
    collects more than this (`Algorithm.collect`, e.g. the vine's branches) returns its own
    record with the same `obs`, `reward` and `normalized`, which the training loop reads.
    """

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array
    # With memory: `first[t]` marks steps that begin an episode (the previous step ended), and
    # `memory` is the networks' `Memory` at the rollout's start (`[B, ...]` leaves).
    first: Any = None
    memory: Any = None
    # With an action mask (`Env.action_mask`): `action_mask[t]` (bool `[T, B, num_actions]`)
    # the actions legal at `obs[t]`; None without one.
    action_mask: Any = None

    def normalized(self, obs_fn: Callable, reward_fn: Callable) -> Trajectory:
        """The learner's view: observations (`obs`, `final_obs`) through `obs_fn`, rewards
        through `reward_fn` (the run's normalisation, `rlax_trpo.normalization`)."""
        return self._replace(
            obs=obs_fn(self.obs), reward=reward_fn(self.reward), final_obs=obs_fn(self.final_obs)
        )


class Batch(NamedTuple):
    """What an update consumes, flattened or not: `[T, B, ...]` or `[N, ...]`."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    advantage: jax.Array
    target: jax.Array  # value target (returns); zeros where there is no critic
    value: jax.Array  # V(obs) at collection time (for value clipping)
    first: Any = None  # with memory: as `Trajectory.first`; the batch stays `[T, B]`
    memory: Any = None  # with memory: the start `Memory` of every environment, `[B, ...]`
    action_mask: Any = None  # with an action mask: as `Trajectory.action_mask`


class EpisodeStats(NamedTuple):
    """Per-env running episode return and length, `[B]` each."""

    episode_return: jax.Array
    episode_length: jax.Array


@flax.struct.dataclass
class TrainState:
    """The carry of the training scan (everything a resumed run needs)."""

    params: Params
    algo_state: Any
    env_state: Any
    obs: jax.Array  # [B, *obs_shape] raw observations
    episode: EpisodeStats
    obs_stats: Any  # RunningMeanStd of observations
    return_stats: Any  # RunningMeanStd of discounted returns (reward scaling)
    return_acc: jax.Array  # [B] running discounted return for reward scaling
    key: jax.Array
    iteration: jax.Array
    last_return: jax.Array  # latest mean finished-episode return (carried when none finish)
    diverged_at: jax.Array  # -1, or the first iteration whose update was non-finite
    memory: Any = None  # with memory: the networks' `Memory` `[B, ...]` where they stand
    first: Any = None  # with memory: `[B]` whether the next observation begins an episode
    pbt: Any = None  # with `pbt:`, the member's `rlax_trpo.pbt.Carry` (its own hyperparameters)


class Program(NamedTuple):
    """What a run compiles and drives (`rlax_trpo.experiment.run`), for one kind of config.

    `init(key, hp) -> state` and `run(state, hp, num_iterations) -> (state, metrics)` are pure
    and are vmapped over the population; `evaluate(state, key) -> scores [n]` too (returns of
    greedy episodes, or a greedy accuracy). The host-side `summarize(metrics, scores, state,
    sweep, seeds, facts)` gives the kind's result figures for `summary.json`, and
    `diverged_at(state)` the first iteration whose update each member skipped as non-finite
    (`[population]`, -1 for none), or None where the kind does not track it. The run driver
    asks the Program, never the config's kind, about everything that differs between kinds.
    """

    name: str  # what is trained on: an environment or a task
    run_name: str  # what the default run folder is named after (runs/<algorithm>_<run_name>_...)
    hparams: Any  # the config's default hyperparameters (a pytree of float scalars)
    hparam_names: tuple[str, ...]  # the fields of `hparams`: what `--sweep hp.NAME` may set
    init: Any
    run: Any
    evaluate: Any
    steps_per_iteration: int  # environment steps (or sampled sequences) per member
    num_iterations: int  # of the whole run
    unit: str  # what a step is, for people: "env steps", "sequences"
    num_envs: int | None  # the axis `--shard envs` splits; None: not splittable
    eval_every: int | None  # also evaluate every K iterations, recorded as `eval_metric`
    eval_metric: str
    curve: str  # the metric of learning_curve.png
    summarize: Any
    diverged_at: Any
    # The population's own run, `(state [P], hp [P], num_iterations) -> (state, metrics [P, n])`,
    # where members act on each other (population-based training); None: `run` vmapped.
    population_run: Any = None
    # Arrays every member reads and none changes (a language model's frozen weights, a prompt
    # bank): placed once, not per member, and given to `init`, `run` and `evaluate` as their
    # last argument. None: those take no such argument.
    shared: Any = None
    # The iteration count annealed hyperparameters decay over (`config.num_iterations`): a
    # traced input of the compiled segment (`rlax_trpo.schedules`), not a constant of it.
    # None: the Program's own schedules keep the counts they are given (a new budget may
    # then compile anew).
    horizon: int | None = None
