"""A trained policy: one member's parameters acting in its environment (`Policy`; with
memory `MemoryPolicy`), greedily or by sampling, episode by episode.

`rlax_trpo.load_policy` (`rlax_trpo.experiment.saved`) restores one from a run folder;
`member_policy` builds one from a run's parts. Host-side; this module is a call site (it
applies `jax.jit`).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rlax_trpo.envs import Env
from rlax_trpo.evaluate import make_episode_recorder, make_evaluate, record_episode
from rlax_trpo.networks import Networks, masked
from rlax_trpo.normalization import observation_transform
from rlax_trpo.types import TrainState


class Policy:
    """One trained member: its parameters and the run's frozen observation normalisation,
    acting in its environment (`rlax_trpo.load_policy` restores one from a run folder).

    `act(obs, key, deterministic=True, action_mask=None)` is a pure, jittable function of an
    observation (or a batch of them): the mode of the policy's distribution, or a sample
    drawn with `key`, after the run's frozen observation normalisation; with `action_mask`
    (bool `[..., num_actions]`, e.g. `env.action_mask(state)`) over the legal actions only.
    `evaluate()` plays whole episodes (masked by the environment, where the run was).

    Args:
      config, env, networks: the run's configuration, environment and networks.
      state: the member's `TrainState` (host or device arrays, no population axis).
      member, setting: which member of its run it is, and its swept hyperparameters.
      eval_key: the raw key data the run evaluated this member with (`evaluate()`'s
        default), or None.
      cache: compiled functions shared by the policies of one run (a dict).
    """

    def __init__(
        self,
        config: Any,
        env: Env,
        networks: Networks,
        state: TrainState,
        member: int = 0,
        setting: dict[str, float] | None = None,
        eval_key: Any = None,
        cache: dict | None = None,
    ):
        self.config, self.env, self.networks, self.state = config, env, networks, state
        self.member, self.setting, self.eval_key = member, setting or {}, eval_key
        self._compiled = {} if cache is None else cache

    def compiled(self, what: tuple, build: Any) -> Any:
        """`jax.jit(build())`, compiled once per `what` for the policies of one run."""
        if what not in self._compiled:
            self._compiled[what] = jax.jit(build())
        return self._compiled[what]

    def observe(self, obs: Any) -> Any:
        """What the policy reads: `obs` after the run's frozen normalisation, if any."""
        return observation_transform(self.config.normalize_obs, self.state.obs_stats)(obs)

    def act(
        self,
        obs: Any,
        key: jax.Array | None = None,
        deterministic: bool = True,
        action_mask: Any = None,
    ) -> Any:
        obs = self.observe(obs)
        dist = self.networks.policy(self.state.params.policy, obs)
        dist = masked(dist, checked_mask(self, action_mask))
        if deterministic:
            return dist.mode()
        if key is None:
            raise ValueError("act: sampling (deterministic=False) needs a key")
        return dist.sample(seed=key)

    def initial_state(self, batch: int | None = None) -> Any:
        """The policy's state at the start of an episode: None for a feed-forward policy
        (`MemoryPolicy` has one)."""
        return None

    def evaluate(
        self,
        episodes: int | None = None,
        key: jax.Array | None = None,
        deterministic: bool = True,
        max_steps: int | None = None,
    ) -> np.ndarray:
        """Returns of `episodes` episodes (default: the run's `eval_episodes`), one per
        parallel environment. The default key is the one the run evaluated this member
        with, so `evaluate()` reproduces `summary.json`'s greedy evaluation of it."""
        episodes = episodes or self.config.eval_episodes
        if key is None:
            if self.eval_key is None:
                raise ValueError("evaluate: this policy has no evaluation key of its run; pass key")
            key = jax.random.wrap_key_data(self.eval_key)
        make = lambda: make_evaluate(
            self.config, self.env, self.networks, episodes, deterministic, max_steps
        )
        fn = self.compiled(("evaluate", episodes, deterministic, max_steps), make)
        return np.asarray(fn(self.state, key))

    def episode(self, key: jax.Array, max_steps: int | None = None) -> Any:
        """One greedy episode with its env states (`evaluate.Episode`, host arrays), recorded
        in chunks until it ends (or `max_steps`, default the time limit, pass)."""
        recorder = make_episode_recorder(self.config, self.env, self.networks, True, max_steps)
        start = self.compiled(("episode_start", max_steps), lambda: recorder.start)
        advance = self.compiled(("episode_advance", max_steps), lambda: recorder.advance)
        return record_episode(recorder._replace(start=start, advance=advance), self.state, key)


class MemoryPolicy(Policy):
    """A trained member whose policy has memory (`memory: gru | lstm`).

    `act(obs, state, key=None, deterministic=True, action_mask=None) -> (action, state)`: the
    state is what `initial_state()` returned at the episode's start, then what the previous
    `act` returned; `action_mask` as `Policy.act`'s.
    Both are pure and jittable; `obs` is one observation (state from `initial_state()`) or a
    batch `[B, ...]` (state from `initial_state(B)`). `evaluate()` and `episode()` carry the
    state themselves.
    """

    def initial_state(self, batch: int | None = None) -> Any:
        memory = self.networks.memory.initial(1 if batch is None else batch).policy
        return memory if batch is not None else jax.tree.map(lambda h: h[0], memory)

    def act(  # type: ignore[override]
        self,
        obs: Any,
        state: Any,
        key: jax.Array | None = None,
        deterministic: bool = True,
        action_mask: Any = None,
    ) -> tuple[Any, Any]:
        if not deterministic and key is None:
            raise ValueError("act: sampling (deterministic=False) needs a key")
        mask = checked_mask(self, action_mask)
        single = jax.numpy.ndim(obs) == len(self.env.spec.obs_shape)
        if single:
            obs, state = obs[None], jax.tree.map(lambda h: h[None], state)
            mask = None if mask is None else mask[None]
        obs = self.observe(obs)
        first = jax.numpy.zeros(obs.shape[:1], bool)  # a new episode starts from initial_state
        fns = self.networks.memory
        state, dist = fns.policy_step(self.state.params.policy, state, obs, first)
        dist = masked(dist, mask)
        action = dist.mode() if deterministic else dist.sample(seed=key)
        if single:
            action, state = action[0], jax.tree.map(lambda h: h[0], state)
        return action, state


def checked_mask(policy: Policy, action_mask: Any) -> Any:
    """`action_mask` as a bool array, checked against the policy's actions (ValueError)."""
    if action_mask is None:
        return None
    spec = policy.env.spec
    if not spec.discrete:
        raise ValueError(f"act: action_mask given, but {policy.env.name}'s actions are continuous")
    mask = jax.numpy.asarray(action_mask, bool)
    if mask.shape[-1:] != (spec.num_actions,):
        raise ValueError(
            f"act: action_mask has shape {tuple(mask.shape)}; its last axis must have "
            f"{spec.num_actions} entries, one per action"
        )
    return mask


def member_policy(config: Any, env: Env, networks: Networks, state: TrainState, **kwargs) -> Policy:
    """A `Policy` of one member (`Policy`'s arguments), a `MemoryPolicy` when its policy
    network has memory."""
    memory = networks.memory
    if memory is not None and memory.initial(1).policy is not None:
        return MemoryPolicy(config, env, networks, state, **kwargs)
    return Policy(config, env, networks, state, **kwargs)
