"""Resuming a run folder: what `--resume DIR` continues with, read (never written) from its
checkpoint, and the plan a run saves before its first checkpoint so that it can start over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rlax_trpo.checkpoint import (
    CheckpointError,
    _atomic_write,
    find_step,
    load_config,
    saved_steps,
)
from rlax_trpo.config import Config
from rlax_trpo.errors import ConfigError
from rlax_trpo.sweep import Sweep


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


def save_plan(ckpt_dir: Path, plan: Mapping[str, Any]) -> None:
    """`plan.json`: what a run that has no step yet needs to start over (`plan_resume`)."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(ckpt_dir / "plan.json", json.dumps(dict(plan), indent=2) + "\n")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{what} {str(path)!r} is unreadable or not JSON") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{what} {str(path)!r} is not a JSON object")
    return data


def plan_resume(run_dir: Path, config, seeds, seed, sweep) -> ResumePlan:
    """Read (never write) the checkpoint of `run_dir`; what was given must agree with it."""
    if not run_dir.is_dir():
        raise ConfigError(f"--resume: {str(run_dir)!r} is not a run folder")
    ckpt = run_dir / "checkpoint"
    note = None
    if not saved_steps(ckpt) and (ckpt / "plan.json").is_file() and not (ckpt / "LATEST").exists():
        meta = _read_json(ckpt / "plan.json", "run plan")  # died before its first checkpoint
        saved_config = load_config(run_dir)
        note = f"{run_dir}: no checkpoint was saved before the run stopped; it starts over"
        meta["iterations_done"] = 0
    else:
        step, problem = find_step(ckpt)  # verifies the step's checksums
        if problem is not None:
            note = f"warning: {problem}; resuming from {step.name}"
        meta = _read_json(step / "meta.json", "checkpoint facts")
        saved_config = load_config(ckpt)
    if saved_config.to_dict() != meta.get("config"):
        raise CheckpointError(
            f"checkpoint {str(ckpt)!r} does not match: its config.yaml differs from the config "
            f"of its state"
        )
    saved = {"seeds": meta["seeds"], "seed": meta["seed"]}
    saved["sweep"] = Sweep.from_dict(meta["sweep"])
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
    if meta["iterations_done"] >= meta["num_iterations"] and (run_dir / "summary.json").exists():
        raise ConfigError(f"--resume: the run in {str(run_dir)!r} is already complete")
    chunk = meta.get("chunk_iterations")
    start_over = meta["iterations_done"] == 0
    return ResumePlan(
        saved_config, saved["seeds"], saved["seed"], saved["sweep"], chunk, start_over, note
    )
