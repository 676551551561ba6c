"""Resuming a run folder: what `--resume DIR` continues with, read (never written) from its
checkpoint, or from the plan a run saves before its first checkpoint so that it can start
over (`rlax_trpo.experiment.checkpoint.save_plan`).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from rlax_trpo.config.configuration import Config
from rlax_trpo.config.sweep import Sweep
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment.checkpoint import (
    CheckpointError,
    find_step,
    has_plan,
    has_step,
    load_config,
    read_plan,
    read_step,
)


class ResumePlan(NamedTuple):
    """What a resumed run continues with, read from its checkpoint. `start_over`: no step
    was ever saved (the run died before its first checkpoint); it restarts from iteration 0
    with the plan saved when it began. `note`: a line to show (e.g. the step restored is
    not the one LATEST names)."""

    config: Config
    seeds: int
    seed: int
    sweep: Sweep
    chunk_iterations: int | None
    start_over: bool = False
    note: str | None = None


def plan_resume(run_dir: Path, config, seeds, seed, sweep) -> ResumePlan:
    """Read (never write) the checkpoint of `run_dir`; what was given must agree with it."""
    if not run_dir.is_dir():
        raise ConfigError(f"--resume: {str(run_dir)!r} is not a run folder")
    ckpt = run_dir / "checkpoint"
    note = None
    if not has_step(ckpt) and has_plan(ckpt):
        record = read_plan(ckpt)  # died before its first checkpoint: iterations_done is 0
        saved_config = load_config(run_dir)
        note = f"{run_dir}: no checkpoint was saved before the run stopped; it starts over"
    else:
        step, problem = find_step(ckpt)  # verifies the step's checksums
        if problem is not None:
            note = f"warning: {problem}; resuming from {step.name}"
        record = read_step(step)
        saved_config = load_config(ckpt)
    if saved_config.to_dict() != record.config:
        raise CheckpointError(
            f"checkpoint {str(ckpt)!r} does not match: its config.yaml differs from the config "
            f"of its state"
        )
    saved = {"seeds": record.seeds, "seed": record.seed, "sweep": record.sweep}
    for name, value in {"seeds": seeds, "seed": seed, "sweep": sweep}.items():
        if value is not None and value != saved[name]:
            shown = value.to_dict() if name == "sweep" else value
            was = saved[name].to_dict() if name == "sweep" else saved[name]
            raise CheckpointError(
                f"--resume: the checkpoint in {str(run_dir)!r} was made with {name}={was}, "
                f"not {shown}"
            )
    if config is not None and config != saved_config:
        raise CheckpointError(
            f"--resume: the given config differs from the one in {str(ckpt)!r}; resume with "
            f"--resume alone"
        )
    if record.iterations_done >= record.num_iterations and (run_dir / "summary.json").exists():
        raise ConfigError(f"--resume: the run in {str(run_dir)!r} is already complete")
    start_over = record.iterations_done == 0
    return ResumePlan(
        saved_config,
        record.seeds,
        record.seed,
        record.sweep,
        record.chunk_iterations,
        start_over,
        note,
    )
