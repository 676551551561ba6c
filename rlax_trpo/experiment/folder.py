"""The run folder's stages: making it (`make_folder`, under its `RunLock`), its opening
(config.yaml, the plan, live loggers) and the final phase (evaluation, summary, metrics.csv
and plots). Stages of `rlax_trpo.experiment.run`; the files themselves are written by
`rlax_trpo.report.run_files`, the checkpoint by `rlax_trpo.experiment.checkpoint`.

A run writes its folder in place (also when `--out` is an empty mount point) and never
deletes one that holds a checkpoint. summary.json, written last, marks a finished run;
anything short of it is continued by `--resume`: from the newest checkpoint, from the final
phase when training was done, or from the start when no checkpoint was ever saved. A run
that fails before it wrote its plan (`checkpoint/plan.json`) removes what it wrote (nothing
half written); from the plan on the folder is kept. A run whose final checkpoint cannot be
written, with no earlier one, still writes its metrics.csv and summary.json
(`finish_unsaved`).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

from rlax_trpo.errors import ConfigError, RunFailed, arg, arg_value
from rlax_trpo.experiment import checkpoint, loggers, parallel
from rlax_trpo.experiment.chunks import Compiled, Trained
from rlax_trpo.experiment.lock import LOCK, RunLock
from rlax_trpo.experiment.plan import Folder, RunPlan, Setup
from rlax_trpo.experiment.runlog import RUN_LOG
from rlax_trpo.report import run_files, stats
from rlax_trpo.types import Program


class Evaluated(NamedTuple):
    """The final evaluation: `scores` `[population, n]`, and the state on the host."""

    scores: np.ndarray
    state: Any


def make_folder(plan: RunPlan, program: Program, owner: bool) -> Folder:
    """The run folder (default `runs/<algorithm>_<run_name>_<time>`), created and locked by
    its owner. A fresh run's folder must be empty (an empty mount point will do); a resumed
    run's leftovers of unfinished writes are removed, and one that starts over is emptied."""
    name = f"{plan.config.algorithm}_{program.run_name}_{dt.datetime.now():%Y%m%d-%H%M%S}"
    out = plan.out or Path("runs") / name
    if not owner:
        return Folder(out=out, owner=False)
    created = not out.exists()
    flag = arg("out" if plan.resume is None else "resume")  # the argument that named it
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{flag}: cannot create {str(out)!r}: {err.strerror}") from None
    try:
        lock = RunLock.acquire(out, flag)
    except (ConfigError, OSError) as err:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{flag}: cannot write in {str(out)!r}: {err.strerror}") from None
    folder = Folder(out=out, owner=True, created=created, lock=lock)
    if plan.resume is None and any(p.name != LOCK for p in out.iterdir()):
        release_folder(folder, keep=True)  # another run wrote it since the plan was checked
        raise ConfigError(f"{flag}: {str(out)!r} exists and is not an empty directory")
    if plan.resume is not None:
        checkpoint.remove_leftovers(out / "checkpoint", keep=plan.keep_checkpoints)
        for left in out.glob(".*.tmp*"):
            left.unlink(missing_ok=True)
        if plan.start_over:
            _empty(out, keep=(LOCK, RUN_LOG))
    return folder


def _empty(out: Path, keep: tuple[str, ...] = (LOCK,)) -> None:
    """Everything in `out` but the lock (a run that starts over: all of it was its own; its
    log goes on)."""
    for entry in out.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def open_folder(setup: Setup) -> list[Any]:
    """config.yaml, the plan a run without a checkpoint starts over from, and the live
    loggers asked for (process 0)."""
    plan, folder = setup.plan, setup.folder
    if not folder.owner:
        return []
    config = plan.config.to_dict()
    tmp = folder.out / ".config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    os.replace(tmp, folder.out / "config.yaml")
    if plan.resume is None or plan.start_over:
        checkpoint.save_plan(folder.out / "checkpoint", plan.record())
    return loggers.open_writers(
        folder.out,
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
        "compiled_run_programs": len(compiled.chunks) or 1,
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
    diverged = stats.divergence(metrics, program.diverged_at(state), plan.seeds, plan.sweep)
    counted = stats.diverged_mask(metrics, diverged)
    summary.update(program.summarize(counted, scores, state, plan.sweep, plan.seeds, summary))
    if diverged is not None:
        summary["diverged"] = diverged
    summary["status"] = (
        "interrupted"
        if trained.signal is not None
        else "diverged"
        if diverged is not None
        else "complete"
    )
    return summary


def finish_folder(
    setup: Setup, writers: list[Any], metrics: dict[str, np.ndarray], summary: dict[str, Any]
) -> None:
    """The loggers closed; metrics.csv, plots and summary.json (last) written."""
    close_writers(writers)
    folder = setup.folder
    if not folder.owner:
        return
    run_files.write_run_files(
        folder.out,
        metrics,
        summary,
        setup.plan.sweep,
        setup.program.steps_per_iteration,
        setup.program.curve,
    )


def finish_unsaved(
    setup: Setup,
    writers: list[Any],
    metrics: dict[str, np.ndarray],
    summary: dict[str, Any],
    unsaved: Exception,
) -> RunFailed:
    """A run whose final checkpoint could not be written, with no earlier one: its
    metrics.csv, plots and summary.json written all the same, in the run folder or, when
    that cannot take them either, in a new temporary folder; the one line (exit 3) saying
    why the state is lost and where the results are."""
    where = setup.folder.out
    try:
        finish_folder(setup, writers, metrics, summary)
    except OSError:
        for left in where.glob(".*.tmp*"):  # a file it could not finish
            left.unlink(missing_ok=True)
        where = Path(tempfile.mkdtemp(prefix=f"rlax-trpo-{where.name}-"))
        finish_folder(setup._replace(folder=setup.folder._replace(out=where)), [], metrics, summary)
    return RunFailed(
        f"{unsaved}; the run's metrics.csv and summary.json are in {str(where)!r} (its "
        "trained state is not kept)"
    )


def holds_results(folder: Folder) -> bool:
    """Whether the folder holds a saved checkpoint step."""
    return bool(checkpoint.saved_steps(folder.out / "checkpoint"))


def holds_plan(folder: Folder) -> bool:
    """Whether the folder holds the run's plan (then a failure never removes it: `--resume`
    starts the run over from it, or continues its last checkpoint)."""
    return checkpoint.has_plan(folder.out / "checkpoint") or holds_results(folder)


def describe_kept(folder: Folder) -> str:
    """What a run stopped now leaves in its folder (one clause)."""
    where = f"the run folder {str(folder.out)!r}"
    steps = checkpoint.saved_steps(folder.out / "checkpoint")
    if steps:
        last = steps[0].name
        resume = arg_value("resume", folder.out)
        return f"{where} keeps its last checkpoint {last} ({resume} continues it)"
    return f"{where} has no checkpoint yet ({arg('resume')} starts the run over)"


def release_folder(folder: Folder, keep: bool) -> None:
    """The lock released; unless `keep`, what this run wrote removed (the folder too when it
    created it). Only the owner acts."""
    if not folder.owner or folder.lock is None:
        return
    if not keep:
        if folder.created:
            shutil.rmtree(folder.out, ignore_errors=True)
        else:
            _empty(folder.out)
    else:
        discard_temporaries(folder)
    folder.lock.release()


def discard_temporaries(folder: Folder) -> None:
    """The temporary files of writes that will not finish now (a run stopping: a failed
    final phase, a second signal mid-checkpoint), so that a stopped run leaves none."""
    if not folder.owner:
        return
    for left in folder.out.glob(".*.tmp*"):
        if left.is_dir():
            shutil.rmtree(left, ignore_errors=True)
        else:
            left.unlink(missing_ok=True)
    checkpoint.remove_leftovers(folder.out / "checkpoint")


def stopping_now(folder: Folder) -> str:
    """On a second signal, just before the process ends: the temporaries discarded, and what
    the folder keeps (`describe_kept`)."""
    discard_temporaries(folder)
    return describe_kept(folder)


def close_writers(writers: list[Any]) -> None:
    while writers:  # each closes once, also when a later step raises
        writers.pop().close()
