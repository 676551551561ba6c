"""Running observation normalisation and reward scaling, applied inside the training scan.

The acting policy sees observations normalised with the statistics frozen at the start of
the iteration; the learner sees exactly the same transform (so rollout log-probabilities are
recovered exactly), and only then are the statistics updated with the iteration's raw
observations. Reward scaling divides rewards by the running std of the discounted return
(the "reward scaling" detail of Engstrom et al. 2020 and Huang et al. 2022).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class RunningMeanStd:
    """Running mean and variance (Chan et al. parallel update), for obs and return scaling."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def create(cls, shape: tuple[int, ...] = ()) -> RunningMeanStd:
        return cls(jnp.zeros(shape), jnp.ones(shape), jnp.asarray(1e-4))

    def update(self, batch: jax.Array) -> RunningMeanStd:
        """Fold in `batch` of shape `[N, *shape]`."""
        b_mean, b_var = batch.mean(axis=0), batch.var(axis=0)
        n = batch.shape[0]
        delta = b_mean - self.mean
        total = self.count + n
        mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / total
        return RunningMeanStd(mean, m2 / total, total)

    def normalize(self, x: jax.Array, clip: float = 10.0) -> jax.Array:
        return jnp.clip((x - self.mean) / jnp.sqrt(self.var + 1e-8), -clip, clip)

    def scale(self, x: jax.Array, clip: float = 10.0) -> jax.Array:
        """Divide by the std without centring (reward scaling)."""
        return jnp.clip(x / jnp.sqrt(self.var + 1e-8), -clip, clip)


def discounted_return_trace(
    acc: jax.Array, rewards: jax.Array, dones: jax.Array, gamma: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Running discounted return per env, the statistic reward scaling divides by.

    Args:
      acc: `[B]` carried return at the start of the rollout.
      rewards, dones: `[T, B]`.

    Returns:
      (final acc `[B]`, returns `[T, B]`) with ret_t = gamma * ret_{t-1} * (1 - done_{t-1}) + r_t.
    """

    def step(carry, xs):
        r, d = xs
        ret = carry * gamma + r
        return ret * (1.0 - d), ret

    return jax.lax.scan(step, acc, (rewards, dones.astype(jnp.float32)))


class Statistics(NamedTuple):
    """The normalisers' carried state: observation stats, return stats, running return `[B]`."""

    obs: RunningMeanStd
    returns: RunningMeanStd
    return_acc: jax.Array


def observation_transform(
    normalize_obs: bool, obs_stats: RunningMeanStd
) -> Callable[[jax.Array], jax.Array]:
    """What the policy and the learner see: normalised with frozen `obs_stats`, or raw."""
    if normalize_obs:
        return obs_stats.normalize
    return lambda obs: obs


def normalize_trajectory(
    config, stats: Statistics, traj: Any, done: jax.Array, gamma: jax.Array
) -> tuple[Any, Statistics]:
    """The learner's view of a raw rollout, and the statistics updated with it.

    `traj` is a `Trajectory`, or an algorithm's own rollout record with the same `obs`,
    `reward` and `normalized(obs_fn, reward_fn)`. Rewards are scaled with return statistics
    that already include this rollout; observations are normalised with the statistics the
    policy acted with, which are updated only afterwards.
    """
    obs_stats, return_stats, return_acc = stats
    raw_obs = traj.obs
    scale_reward = lambda reward: reward
    if config.normalize_reward:
        return_acc, returns = discounted_return_trace(return_acc, traj.reward, done, gamma)
        return_stats = return_stats.update(returns.reshape(-1))
        scale_reward = return_stats.scale
    view = traj.normalized(observation_transform(config.normalize_obs, obs_stats), scale_reward)
    if config.normalize_obs:
        obs_stats = obs_stats.update(raw_obs.reshape((-1,) + raw_obs.shape[2:]))
    return view, Statistics(obs_stats, return_stats, return_acc)
