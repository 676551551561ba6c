"""The run folder: where a run writes (`Folder`), its opening (config.yaml, live loggers)
and the final phase (evaluation, summary, metrics.csv and plots, the folder in its place).
Stages of `rlax_trpo.experiment.run`; the files themselves are `rlax_trpo.report`'s.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import yaml

from rlax_trpo import checkpoint, loggers, parallel, report
from rlax_trpo.types import Program

if TYPE_CHECKING:
    from rlax_trpo.chunks import Compiled, Trained
    from rlax_trpo.experiment import RunPlan, Setup


class Folder(NamedTuple):
    """The run folder and where its files are written: the folder itself for a chunked run
    (so --resume finds it), else a temporary sibling renamed at the end (a run folder is
    whole or absent). `owner`: this process writes it (process 0 speaks for all)."""

    out: Path
    work: Path
    owner: bool


class Evaluated(NamedTuple):
    """The final evaluation: `scores` `[population, n]`, and the state on the host."""

    scores: np.ndarray
    state: Any


def make_folder(plan: RunPlan, program: Program, owner: bool) -> Folder:
    """The run folder (default `runs/<algorithm>_<run_name>_<time>`) and its working folder."""
    name = f"{plan.config.algorithm}_{program.run_name}_{dt.datetime.now():%Y%m%d-%H%M%S}"
    out = plan.out or Path("runs") / name
    work = out if plan.chunked else out.parent / f".{out.name}.tmp-{parallel.run_token()}"
    return Folder(out=out, work=work, owner=owner)


def open_folder(setup: Setup) -> list[Any]:
    """The working folder with config.yaml, and the live loggers asked for (process 0)."""
    plan, folder = setup.plan, setup.folder
    if not folder.owner:
        return []
    config = plan.config.to_dict()
    folder.work.mkdir(parents=True, exist_ok=True)
    (folder.work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return loggers.open_writers(
        folder.work,
        folder.out.name,
        config,
        plan.settings,
        plan.seeds,
        plan.seed,
        plan.tensorboard,
        plan.wandb,
    )


def evaluate(setup: Setup, compiled: Compiled, trained: Trained) -> Evaluated:
    """The final evaluation of every member, and the state brought to the host."""
    scores = compiled.evaluate(trained.state, setup.placement.eval_keys)
    return Evaluated(
        scores=np.asarray(parallel.to_host(scores)),
        state=parallel.to_host(checkpoint.to_savable(trained.state)),
    )


def summarize(
    setup: Setup, compiled: Compiled, trained: Trained, evaluated: Evaluated
) -> dict[str, Any]:
    """summary.json: the run's facts, the Program's result figures, where it diverged."""
    plan, program = setup.plan, setup.program
    steps = trained.iterations * program.steps_per_iteration
    summary = {
        "algorithm": plan.config.algorithm,
        "env": program.name,
        "num_seeds": plan.seeds,
        "num_settings": len(plan.settings),
        "population": plan.population,
        "total_env_steps": steps,
        "unit": program.unit,
        "num_iterations": plan.total,
        "iterations_done": trained.iterations,
        "chunk_iterations": plan.chunk,
        "compiled_run_programs": len(compiled.chunks),
        "wall_seconds": trained.wall_seconds,
        "compile_seconds": compiled.compile_seconds,
        "env_steps_per_second": steps * plan.population / trained.wall_seconds,
        "num_devices": setup.placement.num_devices,
        "device_layout": plan.shard,
        **parallel.describe_devices(),
    }
    if plan.sweep.names:
        summary["swept"] = plan.sweep.to_dict()
    metrics, scores, state = trained.metrics, evaluated.scores, evaluated.state
    summary.update(program.summarize(metrics, scores, state, plan.sweep, plan.seeds, summary))
    diverged = report.divergence(metrics, program.diverged_at(state), plan.seeds)
    if diverged is not None:
        summary["diverged"] = diverged
    return summary


def finish_folder(
    setup: Setup, writers: list[Any], metrics: dict[str, np.ndarray], summary: dict[str, Any]
) -> None:
    """The loggers closed; metrics.csv, plots and summary.json (last) written; an unchunked
    run's working folder renamed to the run folder."""
    close_writers(writers)
    folder = setup.folder
    if not folder.owner:
        return
    report.write_run_files(
        folder.work,
        metrics,
        summary,
        setup.plan.sweep,
        setup.program.steps_per_iteration,
        setup.program.curve,
    )
    if folder.work != folder.out:
        if folder.out.exists():
            folder.out.rmdir()  # checked empty before anything was written
        folder.work.rename(folder.out)


def remove_work_folder(folder: Folder) -> None:
    """An unchunked run's working folder left by a failure (process 0 owns the folder)."""
    if folder.owner and folder.work != folder.out and folder.work.exists():
        shutil.rmtree(folder.work, ignore_errors=True)


def close_writers(writers: list[Any]) -> None:
    while writers:  # each closes once, also when a later step raises
        writers.pop().close()
