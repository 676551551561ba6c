"""`rlax-trpo report`'s inputs: run folders (`summary.json`) and the results published by
`benchmarks/standard_tables.py` (a JSON with `task`, `command`, `date` and the run's `summary`),
read into one record per run (algorithm, task, per-seed scores, provenance), and the cells
(algorithm, task) that `rlax_trpo.report.aggregate` computes its statistics over. Every bad input is
one `ReportError` line naming the file."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlax_trpo.errors import ConfigError


class ReportError(ConfigError):
    """Bad input to the report: the message is one line naming the input and the problem."""


def load_runs(paths: Sequence[Path], score: str = "return") -> list[dict[str, Any]]:
    """One record per run found under `paths` (see `runs_in`), each file counted once."""
    runs, seen = [], set()
    for path in paths:
        for run in runs_in(Path(path), score):
            if Path(run["path"]).resolve() not in seen:
                seen.add(Path(run["path"]).resolve())
                runs.append(run)
    return runs


def runs_in(path: Path, score: str = "return") -> list[dict[str, Any]]:
    """The runs of one PATH: a run folder, a published JSON (or a summary.json), or a folder
    whose `*.json` published results and whose subfolders' runs are taken. `score` as in
    `_run_record`."""
    if not path.exists():
        raise ReportError(f"{path}: no such file or folder")
    if path.is_file():
        data = _read_json(path)
        if _is_published(data):
            return [_run_record(path, data["summary"], data, score)]
        if isinstance(data, dict) and "final_return_per_seed" in data:
            return [_run_record(path, data, score=score)]
        what = "neither a run's summary.json nor a result of benchmarks/standard_tables.py"
        raise ReportError(f"{path}: {what} (keys task, command, date, summary)")
    if (path / "summary.json").is_file():
        return [_run_record(path / "summary.json", _read_json(path / "summary.json"), None, score)]
    found = []
    for file in sorted(path.glob("*.json")):
        data = _read_json(file, strict=False)
        if _is_published(data):
            found.append(_run_record(file, data["summary"], data, score))
    for sub in sorted(p for p in path.iterdir() if (p / "summary.json").is_file()):
        found.append(
            _run_record(sub / "summary.json", _read_json(sub / "summary.json"), None, score)
        )
    if not found:
        raise ReportError(
            f"{path}: no runs in it (no summary.json, no subfolder with one, no "
            "result published by benchmarks/standard_tables.py)"
        )
    return found


def _read_json(path: Path, strict: bool = True) -> Any:
    """The JSON in `path`; unreadable: `ReportError`, or None when not `strict`."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        if not strict:
            return None
        why = err.strerror if isinstance(err, OSError) else "not valid JSON"
        raise ReportError(f"{path}: cannot be read ({why})") from None


def _is_published(data: Any) -> bool:
    """Whether `data` is a result published by benchmarks/standard_tables.py."""
    keys = ("task", "command", "date", "summary")
    return (
        isinstance(data, dict)
        and all(k in data for k in keys)
        and isinstance(data["summary"], dict)
    )


def _per_seed(file: Path, summary: dict, score: str) -> Any:
    """The per-seed scores named by `score`: "return" (`final_return_per_seed`) or one of the
    environment's episode figures (`final_episode_figures_per_seed`, e.g. Craftax's
    `score_percent`)."""
    if score == "return":
        raw = summary.get("final_return_per_seed")
        if not isinstance(raw, list) or not raw:
            raise ReportError(f"{file}: no final_return_per_seed (a language-model run?)")
        return raw
    figures = summary.get("final_episode_figures_per_seed")
    if not isinstance(figures, dict) or score not in figures:
        have = ", ".join(["return", *sorted(figures)]) if isinstance(figures, dict) else "return"
        raise ReportError(f"{file}: no episode figure {score!r} (it has: {have})")
    raw = figures[score]
    if not isinstance(raw, list) or not raw:
        raise ReportError(f"{file}: episode figure {score!r} is not a list of per-seed scores")
    return raw


def _run_record(
    file: Path, summary: Any, published: dict | None = None, score: str = "return"
) -> dict[str, Any]:
    """A run's algorithm, task, finite per-seed scores and provenance, from its summary.
    `score`: "return", or the name of an episode figure the run logged (`score_percent`)."""
    published = published or {}
    if not isinstance(summary, dict) or not isinstance(summary.get("algorithm"), str):
        raise ReportError(f"{file}: not a run summary (no algorithm)")
    settings = summary.get("num_settings", 1)
    if settings != 1:
        raise ReportError(f"{file}: a sweep of {settings} settings; a table cell is one setting")
    raw = _per_seed(file, summary, score)
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in raw):
        what = "final_return_per_seed" if score == "return" else f"episode figure {score!r}"
        raise ReportError(f"{file}: {what} holds a value that is not a number")
    scores = [float(v) for v in raw if v is not None and math.isfinite(v)]
    if not scores:
        raise ReportError(f"{file}: no seed finished an episode ({score} per seed: {raw})")
    task = published.get("task") or summary.get("env")
    if not isinstance(task, str):
        raise ReportError(f"{file}: names no task (no 'task' and no env in its summary)")
    # A published cell may name its table row (ppo_rnn: PPO with a recurrent policy).
    algorithm = published.get("algorithm") or summary["algorithm"]
    if not isinstance(algorithm, str):
        raise ReportError(f"{file}: its 'algorithm' is not a name")
    return {
        "path": str(file),
        "algorithm": algorithm,
        "task": task,
        "scores": scores,
        "dropped_seeds": len(raw) - len(scores),
        "total_env_steps": summary.get("total_env_steps"),
        "command": published.get("command"),
        "date": published.get("date"),
    }


def cells_of(runs: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], list[float]], list[str]]:
    """Scores per (algorithm, task), the seeds of runs of one cell concatenated, and notes."""
    cells: dict[tuple[str, str], list[float]] = {}
    by_cell: dict[tuple[str, str], list[dict]] = {}
    notes = []
    for run in runs:
        key = (run["algorithm"], run["task"])
        cells.setdefault(key, []).extend(run["scores"])
        by_cell.setdefault(key, []).append(run)
        if run["dropped_seeds"]:
            notes.append(
                f"{run['path']}: {run['dropped_seeds']} seed(s) finished no episode "
                "in the last 10% of iterations and are left out"
            )
    for (algo, task), group in sorted(by_cell.items()):
        if len(group) > 1:
            counts = " + ".join(str(len(r["scores"])) for r in group)
            notes.append(
                f"{algo} on {task}: the seeds of {len(group)} inputs are concatenated "
                f"({counts} = {len(cells[algo, task])})"
            )
            if len({r["total_env_steps"] for r in group}) > 1:
                notes.append(f"{algo} on {task}: its inputs ran different budgets")
    return cells, notes
