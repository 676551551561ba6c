"""The vine estimator of TRPO (Schulman et al. 2015, sec. 5.2): branch actions from restored states.

Single path estimates Q(s, a) by the one return that followed a. The vine instead draws a
*rollout set* of states from the single-path rollout, restores the environment to each of them
and tries several actions there, each branch rolled out for a few steps with the *same* random
numbers (common random numbers), so that the branches of a state differ only through their
first action:

    rollout set   s_1..s_S drawn uniformly from the T x B states of the rollout
    branches      a_1..a_K per state: every action (discrete), or K samples of pi_old
    Q(s, a_k)     sum_{h<H} gamma^h r_h  +  gamma^h' V(s_h')
                  (the critic bootstraps where the branch was cut: at the horizon H, or at a
                  time-limit truncation; a terminated branch has no bootstrap; without
                  `bootstrap` the sum alone, i.e. a rollout to the episode end when H covers it)

The surrogate the policy step increases (the paper's eqs. 15-16):

    every action   L(theta) = mean_n sum_k pi_theta(a_k|s_n) (Q(s_n, a_k) - Qbar(s_n))
    sampled        L(theta) = mean_n sum_k w_k Q(s_n, a_k) / sum_k w_k,
                   w_k = pi_theta(a_k|s_n) / pi_old(a_k|s_n)   (self-normalised IS)

with Qbar(s) = sum_k pi_old(a_k|s) Q(s, a_k): a baseline that leaves the every-action gradient
unchanged (the probabilities sum to one) and makes the surrogate's value an advantage. An
environment here is a pure function of its state pytree, so restoring a state is a gather and
the branches are one more `vmap`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlax_trpo.envs import Env, legal_actions
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import masked
from rlax_trpo.rollout import Collect, EnvCarry, PolicyFn, RolloutResult, collect
from rlax_trpo.types import Trajectory


class Branches(NamedTuple):
    """The branches of one iteration's rollout set (`S` states, `K` actions, horizon `H`)."""

    obs: jax.Array  # [S, *obs] the states' observations
    action: jax.Array  # [S, K, ...] each branch's first action
    log_prob: jax.Array  # [S, K] log pi_old(a_k | s)
    reward: jax.Array  # [S, K, H] each branch step's reward (0 once its episode ended)
    boot_obs: jax.Array  # [S, K, *obs] where the critic bootstraps the branch
    boot_step: jax.Array  # [S, K] h of `boot_obs` (discount gamma^h); -1: terminated, none
    action_mask: Any = None  # [S, num_actions] the legal actions of the states (with a mask)

    def normalized(self, obs_fn: Callable, reward_fn: Callable) -> Branches:
        """The learner's view: observations and rewards transformed as the trajectory's."""
        return self._replace(
            obs=obs_fn(self.obs), reward=reward_fn(self.reward), boot_obs=obs_fn(self.boot_obs)
        )


class VineTrajectory(NamedTuple):
    """The vine's rollout record: the single path (what the critic learns from) and the
    branches of its rollout set. The training loop reads it as it reads a `Trajectory`: the
    raw `obs` and `reward` of the path, and `normalized` for the learner's view."""

    path: Trajectory
    branches: Branches

    @property
    def obs(self) -> jax.Array:
        return self.path.obs

    @property
    def reward(self) -> jax.Array:
        return self.path.reward

    def normalized(self, obs_fn: Callable, reward_fn: Callable) -> VineTrajectory:
        """The learner's view of the path and the branches alike."""
        return VineTrajectory(
            self.path.normalized(obs_fn, reward_fn), self.branches.normalized(obs_fn, reward_fn)
        )


class BranchPlan(NamedTuple):
    """How many branches each state of the rollout set gets, and what they cost."""

    num_actions: int  # K branches per state
    every_action: bool  # the K actions are every action of a discrete space
    extra_env_steps: int  # env steps of the branches per iteration (S x K x H)


def plan_branches(config: Any, networks: Any) -> BranchPlan:
    """The branches of a vine config for the environment its `networks` were built for
    (`networks.spec`): `vine_actions` sampled actions, or 0 for every action of a discrete
    space; the config checked against it (one-line ConfigErrors)."""
    spec = networks.spec
    if networks.recurrent:
        raise ConfigError("sampling: vine needs a policy without memory (memory: none)")
    num_actions, every_action = config.vine_actions, not config.vine_actions
    if every_action:
        if not spec.discrete:
            raise ConfigError(
                f"vine_actions: {config.env} has continuous actions; set the number of "
                "sampled branches per state (>= 2)"
            )
        num_actions = spec.num_actions
    elif num_actions < 2:
        raise ConfigError(f"vine_actions: {num_actions} sampled branches; use at least 2")
    if config.vine_states > config.batch_size:
        raise ConfigError(
            f"vine_states: {config.vine_states} is more than the rollout's "
            f"num_envs x num_steps = {config.batch_size} states"
        )
    extra = config.vine_states * num_actions * config.vine_horizon
    if config.total_env_steps < config.batch_size + extra:
        raise ConfigError(
            f"total_env_steps: {config.total_env_steps} is less than one vine iteration "
            f"({config.batch_size + extra} env steps with the branches)"
        )
    return BranchPlan(num_actions, every_action, extra)


def branch_actions(
    dist: Any, key: jax.Array, num_actions: int, every_action: bool
) -> tuple[jax.Array, jax.Array]:
    """The first actions `[S, K, ...]` of the branches of `S` states and their log pi_old: every
    action of a discrete space in order, or K samples of `dist` (batch shape `[S]`)."""
    if every_action:
        num_states = dist.batch_shape[0]
        actions = jnp.broadcast_to(
            jnp.arange(num_actions, dtype=jnp.int32), (num_states, num_actions)
        )
    else:
        actions = jnp.moveaxis(dist.sample(seed=key, sample_shape=num_actions), 0, 1)
    log_prob = jax.vmap(dist.log_prob, in_axes=1, out_axes=1)(actions)
    return actions, log_prob


def branch_rollouts(
    env: Env,
    policy: PolicyFn,
    states: Any,
    obs: jax.Array,
    actions: jax.Array,
    key: jax.Array,
    horizon: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Roll out every branch from its restored state: `(reward [S, K, H], boot_obs [S, K, *obs],
    boot_step [S, K])` (`Branches`).

    Branch k of state n takes `actions[n, k]`, then follows `policy` for `horizon - 1` steps.
    The K branches of a state use the same key at every step, for the policy's samples and the
    environment's (common random numbers, the paper's variance reduction); different states use
    independent keys.
    """
    num_states, num_actions = actions.shape[:2]
    state_keys = jax.random.split(key, num_states)  # independent streams across states,
    branch_keys = jnp.repeat(state_keys[:, None], num_actions, axis=1)  # shared by branches
    split_steps = jax.vmap(jax.vmap(lambda k: jax.random.split(k, horizon)))
    step_keys = jnp.moveaxis(split_steps(branch_keys), 2, 0)  # [H, S, K]

    def branch_step(state, obs, alive, boot_obs, boot_step, first_action, h, key):
        k_act, k_env = jax.random.split(key)
        mask = legal_actions(env, jax.tree.map(lambda x: x[None], state))
        sampled = masked(policy(obs[None]), mask).sample(seed=k_act)[0]
        action = jnp.where(h == 0, first_action, sampled)
        res = env.step(k_env, state, action)
        reward = jnp.where(alive, res.reward, 0.0)
        cut = alive & res.truncated & ~res.terminated  # time limit: bootstrap from there
        boot_obs = jnp.where(cut, res.final_obs, boot_obs)
        boot_step = jnp.where(cut, h + 1, jnp.where(alive & res.terminated, -1, boot_step))
        alive = alive & ~(res.terminated | res.truncated)
        return (res.state, res.obs, alive, boot_obs, boot_step), reward

    over_branches = jax.vmap(branch_step, in_axes=(0, 0, 0, 0, 0, 0, None, 0))
    over_states = jax.vmap(over_branches, in_axes=(0, 0, 0, 0, 0, 0, None, 0))

    def scan_step(carry, inputs):
        h, keys = inputs
        carry, reward = over_states(*carry, actions, h, keys)
        return carry, reward

    tile = lambda x: jnp.broadcast_to(x[:, None], (num_states, num_actions) + x.shape[1:])
    start = (
        jax.tree.map(tile, states),
        tile(obs),
        jnp.ones((num_states, num_actions), bool),
        tile(obs),
        jnp.full((num_states, num_actions), -1, jnp.int32),
    )
    (_, last_obs, alive, boot_obs, boot_step), rewards = jax.lax.scan(
        scan_step, start, (jnp.arange(horizon), step_keys)
    )
    boot_obs = jnp.where(_expand(alive, boot_obs), last_obs, boot_obs)  # cut at the horizon
    boot_step = jnp.where(alive, horizon, boot_step)
    return jnp.moveaxis(rewards, 0, -1), boot_obs, boot_step


def _expand(mask: jax.Array, like: jax.Array) -> jax.Array:
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


def make_vine_collect(
    num_states: int, num_actions: int, horizon: int, every_action: bool
) -> Collect:
    """The vine's rollout (`rollout.Collect`): the single path with its states kept, then the
    branches of `num_states` of them drawn without replacement: a `VineTrajectory`."""

    def vine_collect(
        env: Env, policy: PolicyFn, carry: EnvCarry, key: jax.Array, num_steps: int
    ) -> RolloutResult:
        k_path, k_pick, k_actions, k_branch = jax.random.split(key, 4)
        ro = collect(env, policy, carry, k_path, num_steps, keep_states=True)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])
        pick = jax.random.choice(k_pick, ro.done.size, (num_states,), replace=False)
        states = jax.tree.map(lambda x: flat(x)[pick], ro.env_states)
        obs = flat(ro.trajectory.obs)[pick]
        mask = legal_actions(env, states)
        dist = masked(policy(obs), mask)
        actions, log_prob = branch_actions(dist, k_actions, num_actions, every_action)
        rewards, boot_obs, boot_step = branch_rollouts(
            env, policy, states, obs, actions, k_branch, horizon
        )
        branches = Branches(obs, actions, log_prob, rewards, boot_obs, boot_step, mask)
        return ro._replace(trajectory=VineTrajectory(ro.trajectory, branches), env_states=None)

    return vine_collect


def branch_values(branches: Branches, gamma: jax.Array, value_fn: Callable | None) -> jax.Array:
    """Q(s_n, a_k) `[S, K]`: each branch's discounted return, plus gamma^h V(boot_obs) where
    the branch was cut (`value_fn(obs [N, *obs]) -> [N]`; None: no bootstrap)."""
    horizon = branches.reward.shape[-1]
    q = (branches.reward * gamma ** jnp.arange(horizon)).sum(-1)
    if value_fn is None:
        return q
    shape = branches.boot_step.shape
    v = value_fn(branches.boot_obs.reshape((-1,) + branches.boot_obs.shape[2:])).reshape(shape)
    bootstrap = branches.boot_step >= 0
    return q + jnp.where(bootstrap, gamma ** jnp.maximum(branches.boot_step, 0) * v, 0.0)


def vine_surrogate_fn(
    policy: Callable, branches: Branches, q: jax.Array, every_action: bool
) -> Callable[[Any], jax.Array]:
    """theta -> L(theta), the vine's surrogate (module docstring) over the rollout set;
    `policy(params, obs) -> distribution`, `q` `[S, K]` held fixed."""
    q = jax.lax.stop_gradient(q)
    old_log_prob = jax.lax.stop_gradient(branches.log_prob)

    def surrogate(params: Any) -> jax.Array:
        dist = policy(params, branches.obs)
        log_prob = jax.vmap(dist.log_prob, in_axes=1, out_axes=1)(branches.action)
        if every_action:
            advantage = q - (jnp.exp(old_log_prob) * q).sum(1, keepdims=True)
            return (jnp.exp(log_prob) * advantage).sum(1).mean()
        weights = jnp.exp(log_prob - old_log_prob)
        return ((weights * q).sum(1) / weights.sum(1)).mean()

    return surrogate
