"""The run record: a run folder's facts, and the one format of the two files that hold them,
`checkpoint/plan.json` (written before the first step) and each step's `meta.json`.

This module alone reads and writes those files (`rlax_trpo.experiment.checkpoint`
re-exports its names and writes a step's through it), and reads a copy of the config
(`read_config_file`: config.yaml). It imports no JAX, so the
multi-process supervisor (`rlax_trpo.experiment.peers`) can ask what a folder holds.

    format_version 2    every key of `PLAN_KEYS` (plan.json) or `STEP_KEYS` (meta.json)
    no format_version   version 1, written before versions existed, read as it was then:
                        only `num_iterations` (and a step's `iterations_done`) are needed;
                        `seeds` falls back to `population`, then 1; the rest to defaults

A file of a version this release does not read, or without a key its version needs, is a
one-line `CheckpointError` naming the file (and the versions this release reads).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlax_trpo.errors import ConfigError

if TYPE_CHECKING:
    from rlax_trpo.config.sweep import Sweep

FORMAT_VERSION = 2  # what this release writes
READ_VERSIONS = (1, 2)  # what it reads
PLAN, META = "plan.json", "meta.json"
PLAN_KEYS = ("config", "seeds", "seed", "sweep", "num_iterations", "chunk_iterations", "population")
STEP_KEYS = (*PLAN_KEYS, "num_devices", "iterations_done", "wall_seconds", "compile_seconds")
_NUMBERS = {
    "seeds": int,
    "seed": int,
    "num_iterations": int,
    "chunk_iterations": int,
    "population": int,
    "num_devices": int,
    "iterations_done": int,
    "wall_seconds": float,
    "compile_seconds": float,
}
_MAY_BE_NONE = ("chunk_iterations", "population", "num_devices")


class CheckpointError(ConfigError):
    """A checkpoint is missing, corrupt, or does not match the run that reads it."""


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """A run's facts: what it was started with (plan.json holds `PLAN_KEYS`) and, in each
    step's meta.json, also how far it got, on how many devices and in how long."""

    config: dict[str, Any] | None  # the resolved config, plain (None: version 1 without it)
    seeds: int
    seed: int
    sweep: Sweep
    num_iterations: int
    chunk_iterations: int | None
    population: int  # settings x seeds
    num_devices: int | None = None  # a step's facts (a plan has none)
    iterations_done: int = 0
    wall_seconds: float = 0.0
    compile_seconds: float = 0.0

    def to_dict(self, keys: tuple[str, ...] = STEP_KEYS) -> dict[str, Any]:
        """`format_version` and `keys`, as plain JSON values: what the files hold."""
        facts = {"format_version": FORMAT_VERSION, **{k: getattr(self, k) for k in keys}}
        facts["sweep"] = self.sweep.to_dict()
        return facts


def save_plan(ckpt_dir: str | Path, record: RunRecord) -> None:
    """plan.json: what a run that has no step yet starts over from (`read_plan`)."""
    Path(ckpt_dir).mkdir(parents=True, exist_ok=True)
    atomic_write(Path(ckpt_dir) / PLAN, json.dumps(record.to_dict(PLAN_KEYS), indent=2) + "\n")


def read_plan(ckpt_dir: str | Path) -> RunRecord:
    """The record in plan.json (no step's facts: `iterations_done` is 0)."""
    return _read(Path(ckpt_dir) / PLAN, PLAN_KEYS, "run plan")


def write_step_facts(step: Path, record: RunRecord) -> None:
    """meta.json in the step folder `step` (being written: `checkpoint.save_step`)."""
    (step / META).write_text(json.dumps(record.to_dict(STEP_KEYS), indent=2) + "\n")


def read_step(step: str | Path) -> RunRecord:
    """The record in the step folder `step` (as `checkpoint.find_step` gives it)."""
    return _read(Path(step) / META, STEP_KEYS, "checkpoint facts")


def saved_steps(ckpt_dir: str | Path) -> list[Path]:
    """The step folders, newest first."""
    found = [p for p in Path(ckpt_dir).glob("iter_*") if p.is_dir() and p.name[5:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[5:]), reverse=True)


def has_step(ckpt_dir: str | Path) -> bool:
    """Whether a step was ever saved in `ckpt_dir` (a step folder or LATEST is there): then
    --resume continues from it, and never starts over."""
    return bool(saved_steps(ckpt_dir)) or (Path(ckpt_dir) / "LATEST").exists()


def has_plan(ckpt_dir: str | Path) -> bool:
    """Whether `ckpt_dir` holds the plan a run writes before its first step."""
    return (Path(ckpt_dir) / PLAN).is_file()


def read_config_file(file: Path) -> dict[str, Any]:
    """The plain config in the YAML file `file` (a config.yaml); `CheckpointError` (one line
    naming the file) when it is missing, unreadable or not a mapping."""
    import yaml

    if not file.is_file():
        raise CheckpointError(f"{str(file)!r} is missing")
    try:
        raw = yaml.safe_load(file.read_text())
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        raise CheckpointError(f"{str(file)!r} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{str(file)!r} is not a mapping")
    return raw


def atomic_write(path: Path, text: str) -> None:
    """`path` replaced by `text` at once (`os.replace`): never half written."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 file's facts as it was read then (see the module's docstring)."""
    defaults = {
        "config": None,
        "seed": 0,
        "sweep": {},
        "chunk_iterations": None,
        "population": None,
        "num_devices": None,
        "wall_seconds": 0.0,
        "compile_seconds": 0.0,
    }
    return {**defaults, **data, "seeds": data.get("seeds", data.get("population", 1))}


def _read(path: Path, keys: tuple[str, ...], what: str) -> RunRecord:
    """The record in `path` (`keys` needed), or a one-line `CheckpointError`."""
    from rlax_trpo.config.sweep import Sweep  # (imports JAX: not at module level)

    where = f"{what} {str(path)!r}"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{where} is unreadable or not JSON") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{where} is not a JSON object")
    version = data.pop("format_version", 1)
    if type(version) is not int or version not in READ_VERSIONS:
        reads = " and ".join(map(str, READ_VERSIONS))
        raise CheckpointError(
            f"{where} has format version {version!r}; this release of "
            f"rlax_trpo reads versions {reads}"
        )
    if version == 1:
        data = _from_version_1(data)
    if missing := [k for k in keys if k not in data]:
        raise CheckpointError(f"{where} has no {missing[0]!r} (format version {version})")
    facts = {k: data[k] for k in keys}
    for key in keys:
        value, kind = facts[key], _NUMBERS.get(key)
        if kind is None or (value is None and key in _MAY_BE_NONE):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            raise CheckpointError(f"{where}: {key} is {value!r}, not a number")
        facts[key] = kind(value)
    if not isinstance(facts["sweep"], dict) or not isinstance(facts["config"], dict | None):
        raise CheckpointError(f"{where}: its config or sweep is not a mapping")
    try:
        facts["sweep"] = Sweep.from_dict(facts["sweep"])
    except (TypeError, ValueError):
        raise CheckpointError(f"{where}: its sweep is not lists of numbers by name") from None
    if facts["population"] is None:  # version 1 without it
        facts["population"] = facts["seeds"] * len(facts["sweep"].settings or [{}])
    return RunRecord(**facts)
