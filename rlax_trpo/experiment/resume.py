"""Resuming a run folder: what `--resume DIR` continues with, read (never written) from its
checkpoint, or from the plan a run saves before its first checkpoint so that it can start
over (`rlax_trpo.experiment.checkpoint.save_plan`).

A run keeps its config in several places: `checkpoint/config.yaml` (the usual copy once a
step is saved), the run folder's `config.yaml` (the usual copy before), every step's
meta.json and plan.json (`RunRecord.config`). `saved_config` reads the first that survives,
and says which when it is not the usual one. Configs are compared validated (both through
`Config`), so a field a later release adds with a default does not make a folder differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from rlax_trpo.config.configuration import Config, config_from_dict
from rlax_trpo.config.sweep import Sweep
from rlax_trpo.errors import ConfigError, arg
from rlax_trpo.experiment.checkpoint import (
    CheckpointError,
    RunRecord,
    find_step,
    has_plan,
    has_step,
    read_config_file,
    read_plan,
    read_step,
    saved_steps,
)
from rlax_trpo.experiment.record import META, PLAN
from rlax_trpo.report import run_files


class ResumePlan(NamedTuple):
    """What a resumed run continues with, read from its checkpoint. `start_over`: no step
    was ever saved (the run died before its first checkpoint); it restarts from iteration 0
    with the plan saved when it began. `note`: lines to show (e.g. the step restored is
    not the one LATEST names; the config is not read from its usual copy)."""

    config: Config
    seeds: int
    seed: int
    sweep: Sweep
    chunk_iterations: int | None
    start_over: bool = False
    note: str | None = None


class SavedConfig(NamedTuple):
    """A run's config as `saved_config` found it: `source`, the file it was read from;
    `note`, a line when that is not the usual copy (which one was used, and why)."""

    config: Config
    source: Path
    note: str | None = None


def plan_resume(run_dir: Path, config, seeds, seed, sweep) -> ResumePlan:
    """Read (never write) the checkpoint of `run_dir`; what was given must agree with it."""
    if not run_dir.is_dir():
        raise ConfigError(f"{arg('resume')}: {str(run_dir)!r} is not a run folder")
    ckpt = run_dir / "checkpoint"
    notes = []
    if not has_step(ckpt) and has_plan(ckpt):
        record = read_plan(ckpt)  # died before its first checkpoint: iterations_done is 0
        found = saved_config(run_dir, record, ckpt / PLAN)
        notes.append(f"{run_dir}: no checkpoint was saved before the run stopped; it starts over")
    else:
        step, problem = find_step(ckpt)  # verifies the step's checksums
        if problem is not None:
            notes.append(f"warning: {problem}; resuming from {step.name}")
        record = read_step(step)
        found = saved_config(run_dir, record, step / META)
    saved = {"seeds": record.seeds, "seed": record.seed, "sweep": record.sweep}
    for name, value in {"seeds": seeds, "seed": seed, "sweep": sweep}.items():
        if value is not None and value != saved[name]:
            shown = value.to_dict() if name == "sweep" else value
            was = saved[name].to_dict() if name == "sweep" else saved[name]
            raise CheckpointError(
                f"{arg('resume')}: the checkpoint in {str(run_dir)!r} was made with {name}={was}, "
                f"not {shown}"
            )
    if config is not None and config != found.config:
        raise CheckpointError(
            f"{arg('resume')}: the given config differs from the one in {str(found.source)!r}; "
            f"resume with {arg('resume')} alone"
        )
    finished = record.iterations_done >= record.num_iterations or not has_step(ckpt)
    if finished and run_files.finished(run_dir):  # (no step: its state was not kept)
        raise ConfigError(f"{arg('resume')}: the run in {str(run_dir)!r} is already complete")
    start_over = record.iterations_done == 0
    if found.note is not None:
        notes.append(found.note)
    return ResumePlan(
        found.config,
        record.seeds,
        record.seed,
        record.sweep,
        record.chunk_iterations,
        start_over,
        "\n".join(notes) or None,
    )


def saved_config(
    run_dir: Path, record: RunRecord | None = None, record_file: Path | None = None
) -> SavedConfig:
    """The config of the run in `run_dir`, from the first copy that survives (is there and
    reads): the usual one (`checkpoint/config.yaml` once a step is saved, else the run
    folder's), then `record`'s (read from `record_file`: the step resumed or plan.json), then
    the others. A copy that reads but differs from `record`'s config is a one-line
    `CheckpointError`, as is a run with no copy left."""
    ckpt = run_dir / "checkpoint"
    usual = ckpt / "config.yaml" if has_step(ckpt) else run_dir / "config.yaml"
    copies = [usual, *([record_file] if record_file is not None else [])]
    copies += [run_dir / "config.yaml", ckpt / "config.yaml", ckpt / PLAN]
    copies += [step / META for step in saved_steps(ckpt)]
    lost = []
    for file in dict.fromkeys(copies):  # each once, in order
        try:
            raw = _config_in(file, record if file == record_file else None)
        except CheckpointError as err:
            lost.append(str(err))
            continue
        config = _validated(raw, file)
        if record is not None and record.config is not None and file != record_file:
            if _validated(record.config, record_file) != config:  # compared validated
                raise CheckpointError(
                    f"checkpoint {str(ckpt)!r} does not match: {_name(file, run_dir)} "
                    f"differs from the config of its state ({_name(record_file, run_dir)})"
                )
        note = None
        if file != usual:
            note = f"note: {lost[0]}; the run's config is read from {str(file)!r}"
        return SavedConfig(config, file, note)
    raise CheckpointError(f"no copy of the run's config survives in {str(run_dir)!r}: {lost[0]}")


def _name(file: Path, run_dir: Path) -> str:
    """`file` as a path inside the run folder (`checkpoint/config.yaml`)."""
    return str(file.relative_to(run_dir)) if file.is_relative_to(run_dir) else str(file)


def _config_in(file: Path, record: RunRecord | None) -> dict[str, Any]:
    """The plain config in `file`: a config.yaml, or the record in a plan.json or meta.json
    (`record`, when already read); `CheckpointError` when it is missing or unreadable."""
    if file.suffix != ".json":
        return read_config_file(file)
    if record is None:
        if not file.is_file():
            raise CheckpointError(f"{str(file)!r} is missing")
        record = read_plan(file.parent) if file.name == PLAN else read_step(file.parent)
    if record.config is None:
        raise CheckpointError(f"{str(file)!r} holds no config (format version 1)")
    return record.config


def _validated(raw: dict[str, Any], file: Path | None) -> Config:
    """`raw` as this release's `Config` (a later field at its default); a one-line
    ConfigError naming `file` when it is not a valid config."""
    try:
        return config_from_dict(raw)
    except ConfigError as err:
        raise ConfigError(f"the config in {str(file)!r}: {err}") from None
