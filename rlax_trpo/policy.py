"""Saved runs: restore a run folder's population and evaluate it (`train.py eval`).

Host-side; this module is a call site (it applies `jax.jit`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo import checkpoint
from rlax_trpo import sweep as sweeplib
from rlax_trpo.config import Config
from rlax_trpo.errors import ConfigError
from rlax_trpo.evaluate import make_episode, make_evaluate, render_gif
from rlax_trpo.program import make_program
from rlax_trpo.training import make_trainer


class RunEvaluation(NamedTuple):
    """Returns `[population, episodes]` of a saved run, greedy and (for control runs)
    sampling; for a language-model run, the greedy held-out accuracy `[population, 1]`."""

    config: Any
    meta: dict
    settings: list
    seeds: int
    greedy: np.ndarray
    sampling: np.ndarray | None
    state: Any  # the restored population state (host arrays)
    trainer: Any  # control runs: the `Trainer` (env, networks); None otherwise


def evaluate_run(
    run_dir: str | Path, episodes: int = 10, seed: int = 1234, max_steps: int | None = None
) -> RunEvaluation:
    """Restore the latest checkpoint of a run folder and evaluate every member in one
    compiled call: `episodes` greedy and sampling episodes each (control runs), or the
    greedy held-out accuracy (language-model runs)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"--run: {str(run_dir)!r} is not a run folder")
    ckpt = run_dir / "checkpoint"
    meta = checkpoint.read_meta(ckpt)
    config = checkpoint.load_config(ckpt)
    sweep = sweeplib.Sweep.from_dict(meta.get("sweep", {}))
    settings = sweep.settings or [{}]
    seeds = int(meta.get("seeds", meta.get("population", 1)))
    program = make_program(config)
    hps = sweeplib.population_hparams(program.hparams, sweep, seeds)
    key_data = sweeplib.population_key_data(0, seeds, len(settings))
    abstract = jax.eval_shape(
        lambda kd, hp: jax.vmap(program.init)(jax.random.wrap_key_data(kd), hp), key_data, hps
    )
    state, _, meta = checkpoint.restore_step(ckpt, abstract)
    keys = sweeplib.population_key_data(seed, seeds, len(settings))
    if not isinstance(config, Config):
        greedy = jax.jit(jax.vmap(program.evaluate))(state, jax.random.wrap_key_data(keys))
        return RunEvaluation(config, meta, settings, seeds, np.asarray(greedy), None, state, None)
    trainer = make_trainer(config)

    def both(s, kd):
        ks = jax.random.wrap_key_data(kd)
        env, nets = trainer.env, trainer.networks
        greedy = make_evaluate(config, env, nets, episodes, True, max_steps)
        sampling = make_evaluate(config, env, nets, episodes, False, max_steps)
        return jax.vmap(greedy)(s, ks), jax.vmap(sampling)(s, ks)

    greedy, sampling = (np.asarray(x) for x in jax.jit(both)(state, keys))
    return RunEvaluation(config, meta, settings, seeds, greedy, sampling, state, trainer)


def render_member(
    ev: RunEvaluation, member: int, path: str | Path, seed: int, max_steps: int | None = None
) -> int:
    """Record one greedy episode of population member `member` and render it to `path`."""
    if ev.trainer is None:
        raise ConfigError("--gif: only runs in an environment can be rendered")
    one = jax.tree.map(lambda x: x[member], ev.state)
    env, nets = ev.trainer.env, ev.trainer.networks
    episode = jax.jit(make_episode(ev.config, env, nets, True, max_steps))(
        one, jax.random.key(seed)
    )
    return render_gif(env, jax.tree.map(np.asarray, episode), path)


def format_evaluation(ev: RunEvaluation, run_dir: str | Path) -> str:
    """The lines `train.py eval` prints: greedy (and sampling) results per setting."""
    what = getattr(ev.config, "env", None) or f"lm/{ev.config.task}"
    head = f"{ev.config.algorithm} on {what}: {run_dir} (iteration {ev.meta['iterations_done']}"
    head += f" of {ev.meta['num_iterations']}), "
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
