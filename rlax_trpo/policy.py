"""Saved runs: restore a run folder, act with a trained member (`load_policy`), evaluate the
population (`rlax-trpo eval`).

Host-side; this module is a call site (it applies `jax.jit`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo import checkpoint
from rlax_trpo import sweep as sweeplib
from rlax_trpo.errors import ConfigError
from rlax_trpo.evaluate import make_episode_recorder, make_evaluate, record_episode, render_gif
from rlax_trpo.program import make_program
from rlax_trpo.training import make_trainer


class SavedRun:
    """A run folder's latest checkpoint, restored once: its config, record (the run's facts,
    `checkpoint.RunRecord`), sweep settings and the population state (host arrays).
    `policy(member)` is one trained member."""

    def __init__(self, run_dir: str | Path):
        run_dir = Path(run_dir)
        if not (run_dir / "checkpoint").is_dir():
            raise ConfigError(f"--run: {str(run_dir)!r} is not a run folder")
        ckpt = run_dir / "checkpoint"
        self.run_dir = run_dir
        self.config = checkpoint.load_config(ckpt)
        record = checkpoint.read_record(ckpt)  # (version 1 without seeds: its population)
        self.sweep = record.sweep
        self.settings = self.sweep.settings or [{}]
        self.seeds, self.seed = record.seeds, record.seed
        self.program = make_program(self.config)
        hps = sweeplib.population_hparams(self.program.hparams, self.sweep, self.seeds)
        key_data = sweeplib.population_key_data(0, self.seeds, len(self.settings))
        abstract = jax.eval_shape(
            lambda kd, hp: jax.vmap(self.program.init)(jax.random.wrap_key_data(kd), hp),
            key_data,
            hps,
        )
        self.state, _, self.record = checkpoint.restore_step(ckpt, abstract)
        # A control algorithm has a training loop to act with; a language-model run does not.
        self.trainer = make_trainer(self.config) if self.config.spec.make is not None else None
        self._compiled: dict[tuple, Any] = {}  # shared by this run's policies

    @property
    def population(self) -> int:
        return len(self.settings) * self.seeds

    def member_keys(self, seed: int) -> np.ndarray:
        """Raw evaluation key data `[population, ...]` drawn from `seed` as a run does."""
        return sweeplib.population_key_data(seed, self.seeds, len(self.settings))

    def policy(self, member: int = 0) -> Policy:
        if not 0 <= member < self.population:
            raise ConfigError(f"member: must be between 0 and {self.population - 1} (got {member})")
        if self.trainer is None:
            raise ConfigError("load_policy: language-model runs have no control policy")
        networks = self.trainer.networks
        if networks.memory is not None and networks.memory.initial(1).policy is not None:
            return MemoryPolicy(self, member)
        return Policy(self, member)

    def compiled(self, what: tuple, build: Any) -> Any:
        if what not in self._compiled:
            self._compiled[what] = jax.jit(build())
        return self._compiled[what]


class Policy:
    """One trained member of a saved run (`load_policy`).

    `act(obs, key, deterministic=True)` is a pure, jittable function of an observation (or
    a batch of them): the mode of the policy's distribution, or a sample drawn with `key`,
    after the run's frozen observation normalisation. `evaluate()` plays whole episodes.
    """

    def __init__(self, run: SavedRun, member: int):
        self.run, self.member, self.config = run, member, run.config
        self.state = jax.tree.map(lambda x: x[member], run.state)
        self.env, self.networks = run.trainer.env, run.trainer.networks
        self.setting = run.settings[member // run.seeds]

    def act(self, obs: Any, key: jax.Array | None = None, deterministic: bool = True) -> Any:
        if self.config.normalize_obs:
            obs = self.state.obs_stats.normalize(obs)
        dist = self.networks.policy(self.state.params.policy, obs)
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
            key = jax.random.wrap_key_data(self.run.member_keys(self.run.seed + 1)[self.member])
        what = ("evaluate", episodes, deterministic, max_steps)
        fn = self.run.compiled(what, lambda: make_evaluate(
            self.config, self.env, self.networks, episodes, deterministic, max_steps
        ))  # fmt: skip
        return np.asarray(fn(self.state, key))

    def episode(self, key: jax.Array, max_steps: int | None = None) -> Any:
        """One greedy episode with its env states (`evaluate.Episode`, host arrays), recorded
        in chunks until it ends (or `max_steps`, default the time limit, pass)."""
        recorder = make_episode_recorder(self.config, self.env, self.networks, True, max_steps)
        start = self.run.compiled(("episode_start", max_steps), lambda: recorder.start)
        advance = self.run.compiled(("episode_advance", max_steps), lambda: recorder.advance)
        return record_episode(recorder._replace(start=start, advance=advance), self.state, key)


class MemoryPolicy(Policy):
    """A trained member whose policy has memory (`memory: gru | lstm`).

    `act(obs, state, key=None, deterministic=True) -> (action, state)`: the state is what
    `initial_state()` returned at the episode's start, then what the previous `act` returned.
    Both are pure and jittable; `obs` is one observation (state from `initial_state()`) or a
    batch `[B, ...]` (state from `initial_state(B)`). `evaluate()` and `episode()` carry the
    state themselves.
    """

    def initial_state(self, batch: int | None = None) -> Any:
        memory = self.networks.memory.initial(1 if batch is None else batch).policy
        return memory if batch is not None else jax.tree.map(lambda h: h[0], memory)

    def act(  # type: ignore[override]
        self, obs: Any, state: Any, key: jax.Array | None = None, deterministic: bool = True
    ) -> tuple[Any, Any]:
        if not deterministic and key is None:
            raise ValueError("act: sampling (deterministic=False) needs a key")
        single = jax.numpy.ndim(obs) == len(self.env.spec.obs_shape)
        if single:
            obs, state = obs[None], jax.tree.map(lambda h: h[None], state)
        if self.config.normalize_obs:
            obs = self.state.obs_stats.normalize(obs)
        first = jax.numpy.zeros(obs.shape[:1], bool)  # a new episode starts from initial_state
        fns = self.networks.memory
        state, dist = fns.policy_step(self.state.params.policy, state, obs, first)
        action = dist.mode() if deterministic else dist.sample(seed=key)
        if single:
            action, state = action[0], jax.tree.map(lambda h: h[0], state)
        return action, state


def load_policy(run_dir: str | Path, member: int = 0) -> Policy:
    """Member `member` (setting `member // seeds`, seed `member % seeds`) of the run folder
    `run_dir`, restored from its latest checkpoint:

        policy = rlax_trpo.load_policy("runs/ppo8", member=0)
        obs, state = policy.env.reset(jax.random.key(0))
        action = jax.jit(policy.act)(obs)            # greedy by default
        result = policy.env.step(jax.random.key(1), state, action)   # a `StepResult`
        policy.evaluate()                            # the run's own greedy evaluation

    README.md ("A trained policy in Python") plays a whole episode this way. A run with
    memory gives a `MemoryPolicy`, whose `act(obs, state)` also takes and returns the
    policy's state (`initial_state()` at an episode's start).
    """
    return SavedRun(run_dir).policy(member)


class RunEvaluation(NamedTuple):
    """Returns `[population, episodes]` of a saved run, greedy and (for control runs)
    sampling; for a language-model run, the greedy held-out accuracy `[population, 1]`."""

    run: SavedRun
    greedy: np.ndarray
    sampling: np.ndarray | None

    @property
    def settings(self) -> list:
        return self.run.settings

    @property
    def seeds(self) -> int:
        return self.run.seeds


def evaluate_run(
    run_dir: str | Path, episodes: int = 10, seed: int = 1234, max_steps: int | None = None
) -> RunEvaluation:
    """Evaluate every member of a run folder: `episodes` greedy and sampling episodes each
    through its `Policy` (control runs), or the greedy held-out accuracy (language-model
    runs, in one compiled call)."""
    run = SavedRun(run_dir)
    keys = run.member_keys(seed)
    if run.trainer is None:
        fn = jax.jit(jax.vmap(run.program.evaluate))
        greedy = fn(run.state, jax.random.wrap_key_data(keys))
        return RunEvaluation(run, np.asarray(greedy), None)
    greedy, sampling = [], []
    for member in range(run.population):
        policy, key = run.policy(member), jax.random.wrap_key_data(keys[member])
        greedy.append(policy.evaluate(episodes, key, True, max_steps))
        sampling.append(policy.evaluate(episodes, key, False, max_steps))
    return RunEvaluation(run, np.stack(greedy), np.stack(sampling))


def render_member(
    ev: RunEvaluation, member: int, path: str | Path, seed: int, max_steps: int | None = None
) -> int:
    """Record one greedy episode of population member `member` and render it to `path`."""
    if ev.run.trainer is None:
        raise ConfigError("--gif: only runs in an environment can be rendered")
    policy = ev.run.policy(member)
    episode = policy.episode(jax.random.key(seed), max_steps)
    return render_gif(policy.env, episode, path)


def format_evaluation(ev: RunEvaluation, run_dir: str | Path) -> str:
    """The lines `train.py eval` prints: greedy (and sampling) results per setting."""
    config, record = ev.run.config, ev.run.record
    head = f"{config.algorithm} on {ev.run.program.name}: {run_dir}"
    head += f" (iteration {record.iterations_done}"
    head += f" of {record.num_iterations}), "
    if ev.sampling is None:
        acc = ev.greedy[:, 0]
        per_seed = ", ".join(f"{a:.3f}" for a in acc)
        return head + f"held-out accuracy\n  greedy: {acc.mean():.3f} (per seed {per_seed})"
    lines = [head + f"{ev.greedy.shape[-1]} episodes per seed, mean +- std over seeds"]
    for i, values in enumerate(ev.settings):
        rows = slice(i * ev.seeds, (i + 1) * ev.seeds)
        g, s = ev.greedy[rows].mean(axis=1), ev.sampling[rows].mean(axis=1)
        prefix = f"  [{sweeplib.setting_label(values)}] " if values else "  "
        lines.append(
            f"{prefix}greedy: {g.mean():.2f} +- {g.std():.2f}   "
            f"sampling: {s.mean():.2f} +- {s.std():.2f}"
        )
    return "\n".join(lines)


def best_member(ev: RunEvaluation) -> int:
    """Seed 0 of the setting with the highest mean greedy return."""
    per_setting = ev.greedy.mean(axis=1).reshape(len(ev.settings), ev.seeds).mean(axis=1)
    return int(np.argmax(per_setting)) * ev.seeds
