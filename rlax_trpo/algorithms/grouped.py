"""Grouped rollouts for GRPO in control: G episodes from exact copies of one start state.

A gymnax state is a pytree, so copying it is `jnp.repeat` on every leaf. Each iteration draws
N fresh start states, copies each G times (columns laid out group-major: column b belongs to
group `b // G`), and runs the policy for `num_steps` (the horizon). Only each column's first
episode counts: the steps after its first end (terminated or truncated) come from gymnax's
automatic reset and are masked out, and only the first episode's return is reported.
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import jax.numpy as jnp

from rlax_trpo.advantages import first_episode_mask
from rlax_trpo.envs import Env
from rlax_trpo.networks import Networks, masked
from rlax_trpo.rollout import (
    Collect,
    EnvCarry,
    PolicyFn,
    RolloutResult,
    collect,
    fresh_episodes,
)


def group_ids(num_groups: int, group_size: int) -> jax.Array:
    """`[N * G]` int32 group index of each column: `[0]*G + [1]*G + ... + [N-1]*G`."""
    return jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_size)


def grouped_reset(
    env: Env, key: jax.Array, num_groups: int, group_size: int
) -> tuple[jax.Array, Any]:
    """N start states, each copied G times: observations `[N*G, ...]` and states `[N*G, ...]`.

    Columns `n*G .. n*G + G - 1` hold bit-identical copies of start state n.
    """
    obs, state = jax.vmap(env.reset)(jax.random.split(key, num_groups))
    copy = lambda x: jnp.repeat(x, group_size, axis=0)
    return copy(obs), jax.tree.map(copy, state)


def horizon_warning(env: Env, num_steps: int) -> str | None:
    """The warning for a horizon shorter than the environment's episode limit, or None.

    A grouped trajectory ends at the horizon: an episode that has not terminated by then is
    compared on its partial return and never counts as a finished episode, so with a horizon
    below the limit of a task that only ends at its limit (Pendulum), no episode finishes.
    """
    limit = int(env.spec.max_episode_steps or 0)
    if not limit or num_steps >= limit:
        return None
    return (
        f"warning: num_steps: the GRPO horizon ({num_steps} step(s)) is shorter than "
        f"{env.name}'s episode limit ({limit} steps); trajectories are cut at the horizon and "
        "compared on partial returns, and an episode that does not end within it is never "
        f"reported as finished (set num_steps={limit} to cover whole episodes)"
    )


def warn_short_horizon(env: Env, num_steps: int) -> None:
    """Print `horizon_warning` (one line on stderr) if there is one."""
    text = horizon_warning(env, num_steps)
    if text:
        print(text, file=sys.stderr, flush=True)


def grouped_log_prob(networks: Networks, policy: Any, mb: Any) -> tuple[Any, Any]:
    """(log pi(a|s), entropy) at every step of a grouped minibatch `mb` (leaves `[n, T, G,
    ...]`, as GRPO's `group_minibatches` makes them); with memory each trajectory is re-run
    from its start memory."""
    if mb.memory is None:
        dist = masked(networks.policy(policy, mb.obs), mb.action_mask)
        return dist.log_prob(mb.action), dist.entropy()
    n, steps, g = mb.action.shape[:3]
    # [n, T, G, ...] -> [T, n * G, ...]: one batch axis, as the rollout had (a cell over a
    # rank-3 batch inside the update's scans took XLA:CPU's LLVM over 10 minutes to compile).
    time_major = lambda x: jnp.moveaxis(x, 1, 0).reshape((steps, n * g) + x.shape[3:])
    memory = jax.tree.map(lambda h: h.reshape((n * g,) + h.shape[2:]), mb.memory.policy)
    dist = networks.memory.policy_sequence(policy, memory, time_major(mb.obs), time_major(mb.first))
    if mb.action_mask is not None:
        dist = masked(dist, time_major(mb.action_mask))
    back = lambda x: jnp.moveaxis(x.reshape((steps, n, g)), 0, 1)
    return back(dist.log_prob(time_major(mb.action))), back(dist.entropy())


def make_grouped_collect(group_size: int) -> Collect:
    """A rollout with `rollout.collect`'s signature that collects grouped episodes.

    The given `carry` is ignored except for its width (every iteration starts from fresh
    grouped start states); the returned `done`, `finished_return` and `finished_length` mark
    only each column's first episode end, so the training loop's episode metrics count
    exactly the grouped episodes that finished within the horizon.
    """

    def grouped_collect(
        env: Env, policy: PolicyFn, carry: EnvCarry, key: jax.Array, num_steps: int
    ) -> RolloutResult:
        num_envs = carry.obs.shape[0]
        if num_envs % group_size:
            raise ValueError(f"num_envs {num_envs} is not a multiple of group_size {group_size}")
        k_reset, k_run = jax.random.split(key)
        obs, env_state = grouped_reset(env, k_reset, num_envs // group_size, group_size)
        fresh = fresh_episodes(num_envs)
        # With memory every trajectory begins an episode (`first`), so the policy starts it
        # from the initial state, whatever the carried memory holds.
        first = None if carry.memory is None else jnp.ones((num_envs,), bool)
        start = EnvCarry(env_state, obs, fresh, carry.memory, first)
        ro = collect(env, policy, start, k_run, num_steps)
        traj = ro.trajectory
        alive = first_episode_mask(traj.terminated, traj.truncated)
        first_done = ro.done & (alive > 0)
        return ro._replace(
            carry=ro.carry._replace(episode=fresh),
            finished_return=jnp.where(first_done, ro.finished_return, 0.0),
            finished_length=jnp.where(first_done, ro.finished_length, 0),
            done=first_done,
        )

    return grouped_collect
