"""A finished (or checkpointed) run read back: its population restored from the run
folder (`SavedRun`), one member as a `Policy` (`load_policy`), every member evaluated
(`rlax-trpo eval`).

Host-side; this module is a call site (it applies `jax.jit`).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo.config import sweep as sweeplib
from rlax_trpo.errors import ConfigError, UsageError
from rlax_trpo.evaluate import render_gif
from rlax_trpo.experiment import checkpoint
from rlax_trpo.experiment.lock import RunLock
from rlax_trpo.experiment.plan import unplaced
from rlax_trpo.experiment.population import population_evaluator, population_initializer
from rlax_trpo.experiment.program import make_program
from rlax_trpo.experiment.resume import saved_config
from rlax_trpo.policy import Policy, member_policy
from rlax_trpo.report.inputs import enclosing_run
from rlax_trpo.training import make_trainer


class SavedRun:
    """A run folder's latest checkpoint, restored once: its config, record (the run's facts,
    `checkpoint.RunRecord`), sweep settings and the population state (host arrays).
    `policy(member)` is one trained member."""

    def __init__(self, run_dir: str | Path):
        run_dir = Path(run_dir)
        ckpt = run_dir / "checkpoint"
        if not checkpoint.has_step(ckpt):
            raise ConfigError(no_checkpoint(run_dir))
        step, problem = checkpoint.find_step(ckpt)  # verified; LATEST's, or the newest good
        record = checkpoint.read_step(step)  # (version 1 without seeds: its population)
        found = saved_config(run_dir, record, step / checkpoint.META)
        self.run_dir, self.config = run_dir, found.config
        self.notes = []  # lines for its reader: not LATEST's step, not the usual config
        if problem is not None:
            done, total = record.iterations_done, record.num_iterations
            self.notes.append(
                f"warning: {problem}; using {step.name} ({done} of {total} iterations)"
            )
        if found.note is not None:
            self.notes.append(found.note)
        self.sweep = record.sweep
        self.settings = self.sweep.settings or [{}]
        self.seeds, self.seed = record.seeds, record.seed
        self.program = make_program(self.config)
        hps = sweeplib.population_hparams(self.program.hparams, self.sweep, self.seeds)
        key_data = sweeplib.population_key_data(0, self.seeds, len(self.settings))
        shared = unplaced(self.program.shared)
        abstract = jax.eval_shape(population_initializer(self.program), key_data, hps, shared)
        self.state, _, self.record = checkpoint.restore_step(ckpt, abstract, step)
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
        return member_policy(
            self.config,
            self.trainer.env,
            self.trainer.networks,
            jax.tree.map(lambda x: x[member], self.state),
            member=member,
            setting=self.settings[member // self.seeds],
            eval_key=self.member_keys(self.seed + 1)[member],
            cache=self._compiled,
        )


def no_checkpoint(run_dir: Path) -> str:
    """Why the folder `run_dir` has no step to restore, in one line: it is no run folder, or
    its run has no checkpoint yet (being written, or whether `--resume` can continue it)."""
    ckpt = run_dir / "checkpoint"
    run = enclosing_run(run_dir)
    if run is not None:
        return f"--run: {str(run_dir)!r} is inside the run folder {str(run)!r}; give --run {run}"
    if not run_dir.is_dir() or not (ckpt.is_dir() or (run_dir / "config.yaml").is_file()):
        return f"--run: {str(run_dir)!r} is not a run folder"
    holder = RunLock.holder(run_dir)
    if holder is not None:
        return (
            f"--run: the run in {str(run_dir)!r} has no checkpoint yet: it is being written "
            f"({holder}); its first checkpoint comes after its first chunk"
        )
    if checkpoint.has_plan(ckpt):
        return (
            f"--run: the run in {str(run_dir)!r} has no checkpoint yet: it stopped before its "
            f"first; `--resume {run_dir}` starts it over"
        )
    return (
        f"--run: the run in {str(run_dir)!r} has no checkpoint and cannot be resumed (no "
        "checkpoint/plan.json): train it again"
    )


def load_policy(run_dir: str | Path, member: int | None = None) -> Policy:
    """Member `member` (setting `member // seeds`, seed `member % seeds`) of the run folder
    `run_dir`, restored from its latest checkpoint. By default member 0, or in a run with
    population-based training its best member (`summary.json`'s `pbt.best_member`):

        policy = rlax_trpo.load_policy("runs/ppo8", member=0)
        obs, state = policy.env.reset(jax.random.key(0))
        action = jax.jit(policy.act)(obs)            # greedy by default
        result = policy.env.step(jax.random.key(1), state, action)   # a `StepResult`
        policy.evaluate()                            # the run's own greedy evaluation

    README.md ("A trained policy in Python") plays a whole episode this way. A run with
    memory gives a `MemoryPolicy`, whose `act(obs, state)` also takes and returns the
    policy's state (`initial_state()` at an episode's start).
    """
    run = SavedRun(run_dir)
    for note in run.notes:
        warnings.warn(note, stacklevel=2)
    if member is None:
        member = _best_pbt_member(Path(run_dir))
    return run.policy(member)


def _best_pbt_member(run_dir: Path) -> int:
    """The best member a finished PBT run's summary names; 0 for any other run."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return 0
    pbt = summary.get("pbt") if isinstance(summary, dict) else None
    return int(pbt["best_member"]) if isinstance(pbt, dict) and "best_member" in pbt else 0


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
    run_dir: str | Path | SavedRun,
    episodes: int = 10,
    seed: int = 1234,
    max_steps: int | None = None,
) -> RunEvaluation:
    """Evaluate every member of a run folder (or of a `SavedRun` already restored):
    `episodes` greedy and sampling episodes each through its `Policy` (control runs), or the
    greedy held-out accuracy (language-model runs, in one compiled call)."""
    run = run_dir if isinstance(run_dir, SavedRun) else SavedRun(run_dir)
    keys = run.member_keys(seed)
    if run.trainer is None:
        fn = jax.jit(population_evaluator(run.program))
        greedy = fn(run.state, keys, run.program.shared)
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


def export_pretrained(run: SavedRun, member: int, out: Path) -> Path:
    """Write member `member` of a pretrained model's run as a Hugging Face folder that
    transformers loads (LoRA merged into the weights), with the checkpoint's tokenizer
    files; written beside `out` and renamed into place, so nothing is half written."""
    import shutil

    from rlax_trpo.lm.hf.checkpoint import save_pretrained
    from rlax_trpo.lm.policy import combine
    from rlax_trpo.lm.pretrained_program import load_model

    if run.config.to_dict().get("model_path") is None:
        raise UsageError("--export: only a pretrained model's run (model_path) is exported")
    out = Path(out)
    if out.exists():
        raise UsageError(f"--export: {str(out)!r} exists")
    pretrained = load_model(run.config)
    trained = jax.tree.map(lambda x: np.asarray(x)[member], run.state.grpo.params)
    lora = run.config.lora is not None
    variables = combine(pretrained.params, trained) if lora else trained
    files = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
    extra = {n: pretrained.folder / n for n in files if (pretrained.folder / n).is_file()}
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    save_pretrained(variables, pretrained.config, partial, extra_files=extra)  # adapters merged
    partial.rename(out)
    return out


def eval_command(args: argparse.Namespace) -> int:
    """`rlax-trpo eval` from its parsed options: every member evaluated (greedy and
    sampling), the lines printed, and with `--gif` one greedy episode rendered."""
    for flag, value in (("--episodes", args.episodes), ("--max-steps", args.max_steps)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be a positive integer (got {value})")
    gif = args.run / "episode.gif" if args.gif == Path("episode.gif") else args.gif
    if gif is not None and gif.suffix.lower() != ".gif":
        raise UsageError(f"--gif: {str(gif)!r} must end in .gif")
    run = SavedRun(args.run)  # restored, nothing compiled yet: check --member first
    population = run.population
    if args.member is not None and not 0 <= args.member < population:
        raise UsageError(f"--member: must be between 0 and {population - 1} (got {args.member})")
    for note in run.notes:  # which step and config were used, when not the usual ones
        print(note, file=sys.stderr, flush=True)
    ev = evaluate_run(run, args.episodes, args.seed, args.max_steps)
    print(format_evaluation(ev, args.run))
    if args.export is not None:
        member = 0 if args.member is None else args.member
        folder = export_pretrained(ev.run, member, args.export)
        print(f"member {member} as a Hugging Face folder: {folder}")
    if gif is not None:
        member = best_member(ev) if args.member is None else args.member
        frames = render_member(ev, member, gif, args.seed, args.max_steps)
        print(f"GIF of member {member} (greedy, {frames} steps): {gif}")
    return 0
