"""Rollout collection with `lax.scan`: time-major `[T, B]`, both end flags, pre-reset obs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.envs import Env, legal_actions
from rlax_trpo.networks import masked
from rlax_trpo.types import EpisodeStats, Trajectory

# The acting policy function: observations `[B, ...]` (raw, as the environment returns them)
# -> a distribution over actions. It closes over the parameters and any observation transform.
# With memory it is `(memory, obs, first) -> (memory, distribution)` and advances the critic's
# memory too. (`rlax_trpo.Policy` is another thing: one trained member of a saved run.)
PolicyFn = Callable[..., Any]


class EnvCarry(NamedTuple):
    """Where the environments are: states, observations `[B, ...]`, running episode stats."""

    env_state: Any
    obs: jax.Array
    episode: EpisodeStats
    memory: Any = None  # with memory: the networks' `Memory`, and
    first: Any = None  # `[B]` whether `obs` begins an episode


class RolloutResult(NamedTuple):
    # Raw (unnormalised) observations, `[T, B, ...]`; an `Algorithm.collect` may return a
    # record of its own with the same `obs`, `reward` and `normalized` (the vine's).
    trajectory: Trajectory
    carry: EnvCarry  # where to continue from
    finished_return: jax.Array  # `[T, B]` return of the episode that ended at t, else 0
    finished_length: jax.Array  # `[T, B]`
    done: jax.Array  # `[T, B]` the episode ends that count (terminated | truncated)
    env_states: Any = None  # with `keep_states`: the state each step started from, `[T, B]`
    # The environment's episode figures (`StepResult.info`) summed over the episodes that
    # finished in this rollout, name -> scalar; None for environments without any.
    episode_info: Any = None


# `collect(env, policy, carry, key, num_steps) -> RolloutResult`; an algorithm may bring its
# own (`Algorithm.collect`), e.g. GRPO's grouped rollouts.
Collect = Callable[[Env, PolicyFn, EnvCarry, jax.Array, int], RolloutResult]


def reset_envs(env: Env, key: jax.Array, num_envs: int) -> tuple[jax.Array, Any]:
    """Batched reset: `[B, ...]` observations and states."""
    return jax.vmap(env.reset)(jax.random.split(key, num_envs))


def pooled_step(env: Env, num_envs: int, reset_ratio: int) -> Callable[..., Any]:
    """A batched step that resets finished environments from a pool of fresh states.

    `step(key, states, actions) -> StepResult` over `[num_envs]` environments: every
    environment takes `env.transition` (no reset); `num_envs // reset_ratio` fresh states are
    drawn with `env.reset`, and the environments whose episode ended take them, in a random
    rotation of the pool: the first `pool` to end get distinct fresh states, and should more
    end in the same step, they share some (each still a fresh reset, drawn independently of
    which environment takes it, so a new episode starts from the reset distribution). The
    reset runs on `1 / reset_ratio` of the width instead of all of it, which is what makes
    this cheaper where a reset costs many steps: the "optimistic resets" of Craftax's
    baselines (Matthews et al. 2024).
    """
    if env.transition is None:
        raise ValueError(f"{env.name} has no transition without reset (Env.transition)")
    pool = num_envs // reset_ratio
    transition = jax.vmap(env.transition)
    reset = jax.vmap(env.reset)

    def step(key: jax.Array, state: Any, action: jax.Array):
        k_step, k_pool, k_turn = jax.random.split(key, 3)
        res = transition(jax.random.split(k_step, num_envs), state, action)
        done = jnp.logical_or(res.terminated, res.truncated)
        fresh_obs, fresh_state = reset(jax.random.split(k_pool, pool))
        slot = (jnp.cumsum(done) - 1 + jax.random.randint(k_turn, (), 0, pool)) % pool

        def pick(fresh, old):
            new = fresh[slot]
            return jnp.where(done.reshape(done.shape + (1,) * (old.ndim - 1)), new, old)

        obs = pick(fresh_obs, res.obs)
        return res._replace(obs=obs, state=jax.tree.map(pick, fresh_state, res.state))

    return step


def batched_step(env: Env, num_envs: int, reset_ratio: int = 1) -> Callable[..., Any]:
    """`step(key, states, actions) -> StepResult` over `[num_envs]` environments: each
    environment resetting on its own (`env.step`), or from a pool of fresh states when
    `reset_ratio > 1` (`pooled_step`)."""
    if reset_ratio > 1:
        return pooled_step(env, num_envs, reset_ratio)
    step_one = jax.vmap(env.step)
    return lambda key, state, action: step_one(jax.random.split(key, num_envs), state, action)


def _write(buffers: Any, values: Any, t: jax.Array) -> Any:
    """Write `values` (`[B, ...]` leaves) at step `t` of `buffers` (`[T, B, ...]`).

    The observations are written into buffers carried through the rollout's loop rather than
    stacked as the scan's outputs. The two hold the same values, but under `jax.vmap` (seeds,
    settings) a scan stacks its outputs time first and the population second, and the
    learner's first batched matrix product needs the population first: XLA then copies the
    whole observation batch. A carried buffer keeps the population axis first as written.
    With Craftax's 8,268-float observations that copy is 2 GiB per seed (studies/trpo_memory).
    """
    return jax.tree.map(
        lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x, t, 0), buffers, values
    )


SMALL = 64  # numbers per environment up to which a leaf is packed with others


def _pack(tree: Any) -> Any:
    """`tree` with its small leaves packed by dtype: those of at most `SMALL` numbers per
    environment (`[B, ...]`: the environment's state variables and a small observation,
    episode figures, action indices, log-probabilities, rewards, end flags) side by side in
    one `[B, k]` array per dtype, the step's summed `info` figures (scalars) in one `[k]`;
    larger leaves as they are.

    The rollout's loop carries its state packed and stacks its outputs packed. XLA:CPU
    copies every loop-carried array at each step and writes every stacked output with a
    kernel of its own, so a step then launches one copy and one write per dtype instead of
    one per leaf: 26 kernels a CartPole step in place of 41 (`benchmarks/profile_ppo.py`).
    `_unpack` gives back the same tree, bit for bit."""
    leaves, treedef = jax.tree.flatten(tree)
    groups: dict[Any, list[int]] = {}
    for i, x in enumerate(leaves):
        small = x.ndim == 0 or x.size // x.shape[0] <= SMALL
        groups.setdefault((x.shape[:1], x.dtype) if small else i, []).append(i)
    columns = tuple(tuple(idx) for idx in groups.values())
    arrays = tuple(
        leaves[idx[0]] if len(idx) == 1 else _side_by_side([leaves[i] for i in idx])
        for idx in columns
    )
    shapes = tuple(tuple(leaves[i].shape for i in idx) for idx in columns)
    return _Packed(arrays, (treedef, columns, shapes, len(leaves)))


def _side_by_side(leaves: list[jax.Array]) -> jax.Array:
    """Scalars stacked into `[k]`; `[B, ...]` leaves flattened to `[B, n_i]`, concatenated."""
    if leaves[0].ndim == 0:
        return jnp.stack(leaves, -1)
    return jnp.concatenate([x.reshape(x.shape[0], -1) for x in leaves], -1)


def _unpack(packed: _Packed) -> Any:
    treedef, columns, shapes, n = packed.meta
    leaves: list[Any] = [None] * n
    for array, idx, group in zip(packed.arrays, columns, shapes, strict=True):
        if len(idx) == 1:
            leaves[idx[0]] = array
            continue
        start = 0
        for i, shape in zip(idx, group, strict=True):
            if not shape:  # scalars, stacked
                leaves[i] = array[..., start]
                start += 1
                continue
            width = math.prod(shape[1:])
            part = array[..., start : start + width]
            leaves[i] = part.reshape(array.shape[:-1] + shape[1:])
            start += width
    return jax.tree.unflatten(treedef, leaves)


@jax.tree_util.register_pytree_node_class
class _Packed:
    """Arrays (pytree children) and how to unpack them (static)."""

    def __init__(self, arrays: tuple, meta: tuple):
        self.arrays, self.meta = arrays, meta

    def tree_flatten(self) -> tuple[tuple, tuple]:
        return self.arrays, self.meta

    @classmethod
    def tree_unflatten(cls, meta: tuple, arrays: tuple) -> _Packed:
        return cls(arrays, meta)


def fresh_episodes(num_envs: int) -> EpisodeStats:
    """Zeroed running episode return and length for `num_envs` environments."""
    return EpisodeStats(jnp.zeros((num_envs,)), jnp.zeros((num_envs,), jnp.int32))


def collect(
    env: Env,
    policy: PolicyFn,
    carry: EnvCarry,
    key: jax.Array,
    num_steps: int,
    keep_states: bool = False,
    reset_ratio: int = 1,
) -> RolloutResult:
    """Run the sampling policy for `num_steps` steps in every environment.

    The trajectory stores raw observations; `policy` applies whatever transform it acts with
    (e.g. running normalisation with frozen statistics), and the learner applies the very same
    transform, so it recovers the rollout log-probabilities exactly. With `keep_states` the
    result also holds every step's environment state (to restore it: the vine). With
    `reset_ratio > 1` finished environments restart from a pool of `num_envs / reset_ratio`
    fresh states per step (`pooled_step`) instead of each resetting on its own.
    """
    num_envs = carry.obs.shape[0]
    step_env = batched_step(env, num_envs, reset_ratio)
    with_memory = carry.memory is not None

    def step(loop, step_key):
        packed, t, written = loop
        carry = _unpack(packed)
        env_state, obs, episode, memory, first = carry
        k_act, k_env = jax.random.split(step_key)
        if with_memory:  # the memory is reset where `obs` begins an episode
            memory, dist = policy(memory, obs, first)
        else:
            dist = policy(obs)
        action_mask = legal_actions(env, env_state)  # None without a mask
        dist = masked(dist, action_mask)
        action, log_prob = dist.sample_and_log_prob(seed=k_act)
        res = step_env(k_env, env_state, action)
        done = jnp.logical_or(res.terminated, res.truncated)
        ep_return = episode.episode_return + res.reward
        ep_length = episode.episode_length + 1
        new_episode = EpisodeStats(jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length))
        # The observations go into buffers the loop carries (see `_write`), the rest out as
        # the scan's stacked outputs.
        written = _write(written, (obs, res.final_obs), t)
        transition = Trajectory(
            None,
            action,
            log_prob,
            res.reward,
            res.terminated,
            res.truncated,
            None,
            first,
            action_mask=action_mask,
        )
        logs = (jnp.where(done, ep_return, 0.0), jnp.where(done, ep_length, 0), done)
        info = None
        if res.info is not None:  # summed over this step's finished episodes
            info = {k: jnp.where(done, v, 0.0).sum() for k, v in res.info.items()}
        next_first = done if with_memory else None
        kept = env_state if keep_states else None
        next_carry = EnvCarry(res.state, res.obs, new_episode, memory, next_first)
        return (_pack(next_carry), t + 1, written), _pack((transition, logs, kept, info))

    start = EnvCarry(*carry)
    buffers = jax.tree.map(lambda x: jnp.zeros((num_steps,) + x.shape, x.dtype), start.obs)
    (end, _, (obs, final_obs)), packed = jax.lax.scan(
        step, (_pack(start), jnp.int32(0), (buffers, buffers)), jax.random.split(key, num_steps)
    )
    end = _unpack(end)
    traj, (ret, length, done), states, info = _unpack(packed)
    traj = traj._replace(obs=obs, final_obs=final_obs)
    info = None if info is None else {k: v.sum() for k, v in info.items()}
    # With memory the trajectory also holds the memory it started from, to be re-run.
    return RolloutResult(traj._replace(memory=start.memory), end, ret, length, done, states, info)
