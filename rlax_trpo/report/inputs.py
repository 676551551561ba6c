"""`rlax-trpo report`'s inputs: run folders (`summary.json`) and the results published by
`benchmarks/standard_tables.py` (a JSON with `task`, `command`, `date` and the run's `summary`),
read into one record per run (algorithm, task, per-seed scores, provenance); a sweep's settings
each a record (`--setting` chooses one), a PBT run one record (its best member); a run folder
without summary.json (unfinished) skipped with a note (`--anchors`: `tables.read_anchors`).
Pooling records into cells: `rlax_trpo.report.settings`. Bad input: one `ReportError` line."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlax_trpo.errors import ConfigError
from rlax_trpo.report.settings import setting_text, split_by_settings


class ReportError(ConfigError):
    """Bad input to the report: the message is one line naming the input and the problem."""


def load_runs(
    paths: Sequence[Path], score: str = "return", setting: str | int | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per run found under `paths` (see `runs_in`), each file counted once, and a
    note per input skipped (an unfinished run) or split (a sweep's settings). `ReportError`
    when no finished run is left."""
    runs, notes, seen = [], [], set()
    for path in paths:
        found, said = runs_in(Path(path), score, setting)
        notes += [n for n in said if n not in notes]
        for run in found:
            key = (Path(run["path"]).resolve(), run["setting"])
            if key not in seen:
                seen.add(key)
                runs.append(run)
    if not runs:
        more = f" (and {len(notes) - 1} more)" if len(notes) > 1 else ""
        raise ReportError(f"no finished run to report: {notes[0]}{more}")
    notes += split_by_settings(runs)
    if setting is not None and all(run["setting"] is None for run in runs):
        notes.append(f"--setting {setting}: no input is a sweep, so it chose nothing")
    return runs, notes


def runs_in(
    path: Path, score: str = "return", setting: str | int | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs of one PATH and notes: a run folder, a published JSON (or a summary.json), or
    a folder whose `*.json` published results and whose subfolders' runs are taken. A run
    folder without summary.json (unfinished) is skipped with a note. `score` and `setting`
    as in `records_of`."""
    if not path.exists():
        raise ReportError(f"{path}: no such file or folder")
    if path.is_file():
        data = _read_json(path)
        if _is_published(data):
            return records_of(path, data["summary"], data, score, setting)
        if isinstance(data, dict) and "final_return_per_seed" in data:
            return records_of(path, data, None, score, setting)
        what = "neither a run's summary.json nor a result of benchmarks/standard_tables.py"
        raise ReportError(f"{path}: {what} (keys task, command, date, summary)")
    if (path / "summary.json").is_file():
        return _run_records(path, score, setting)
    run = enclosing_run(path)
    if run is not None:
        raise ReportError(f"{path}: inside the run folder {run}; give the run folder")
    if _unfinished(path):
        return [], [_skipped(path)]
    found, notes = [], []
    try:
        files = sorted(path.glob("*.json"))
        subfolders = sorted(p for p in path.iterdir() if p.is_dir())
    except OSError as err:
        raise ReportError(f"{path}: cannot be read ({err.strerror})") from None
    for file in files:
        data = _read_json(file, strict=False)
        if _is_published(data):
            _add(found, notes, records_of(file, data["summary"], data, score, setting))
    for sub in subfolders:
        if (sub / "summary.json").is_file():
            _add(found, notes, _run_records(sub, score, setting))
        elif _unfinished(sub):
            notes.append(_skipped(sub))
    if not found and not notes:
        raise ReportError(
            f"{path}: no runs in it (no summary.json, no subfolder with one, no "
            "result published by benchmarks/standard_tables.py)"
        )
    return found, notes


def interrupted(summary: Any) -> bool:
    """Whether a summary.json's contents are those of a run a signal stopped short."""
    return isinstance(summary, dict) and summary.get("status") == "interrupted"


def _run_records(folder: Path, score: str | None, setting: Any) -> tuple[list, list]:
    """A run folder's records; none, with a note, for a run a signal stopped short."""
    summary = _read_json(folder / "summary.json")
    if interrupted(summary):
        done, total = summary.get("iterations_done"), summary.get("num_iterations")
        return [], [
            f"{folder}: skipped, a run interrupted after iteration {done} of {total} "
            f"(`rlax-trpo train --resume {folder}` finishes it)"
        ]
    return records_of(folder / "summary.json", summary, None, score, setting)


def _add(found: list, notes: list, more: tuple[list, list]) -> None:
    found += more[0]
    notes += more[1]


def enclosing_run(path: str | Path) -> Path | None:
    """The run folder whose `checkpoint/` is `path` or holds it (a step folder); else None."""
    for run in list(Path(path).parents)[:2]:
        if (
            run / "checkpoint" in (Path(path), Path(path).parent)
            and (run / "config.yaml").is_file()
        ):
            return run
    return None


def _unfinished(folder: Path) -> bool:
    """A run folder without its summary.json: a run still going, or stopped short."""
    return (folder / "checkpoint").is_dir() or (folder / "config.yaml").is_file()


def _skipped(folder: Path) -> str:
    return (
        f"{folder}: skipped, an unfinished run (no summary.json: still running, or stopped; "
        f"`rlax-trpo train --resume {folder}` finishes it)"
    )


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


def records_of(
    file: Path,
    summary: Any,
    published: dict | None = None,
    score: str = "return",
    setting: str | int | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of one summary and notes. A sweep (`num_settings` > 1) gives a record per
    setting, named `algorithm (name=value,...)`, or with `setting` (an index, or "best") the
    one chosen, under the algorithm's own name; the notes say which. `score`: "return", or
    an episode figure's name (summary.json keeps those of its best setting only)."""
    published = published or {}
    if not isinstance(summary, dict) or not isinstance(summary.get("algorithm"), str):
        raise ReportError(f"{file}: not a run summary (no algorithm)")
    settings = summary.get("num_settings", 1)
    if type(settings) is not int or settings < 1:
        raise ReportError(f"{file}: num_settings is {settings!r}, not a positive whole number")
    if settings == 1 and isinstance(summary.get("pbt"), dict):
        return _population_record(file, summary, published, score)
    if settings == 1:
        return [_run_record(file, summary, published, _per_seed(file, summary, score), score)], []
    return _sweep_records(file, summary, published, score, setting)


def _population_record(
    file: Path, summary: dict, published: dict, score: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """A population-based training run as one population: its best member's score (the
    member `pbt.best_member` names), never its members as seeds (they copy each other's
    weights); the note gives the population's size and range and the best agent's schedule."""
    raw = _per_seed(file, summary, score)
    best = summary["pbt"].get("best_member")
    if type(best) is not int or not 0 <= best < len(raw):
        raise ReportError(f"{file}: a PBT run whose pbt.best_member is not one of its members")
    record = _run_record(file, summary, published, [raw[best]], score)
    finite = [float(v) for v in raw if _number(v) and _finite(v)]
    schedule = sorted((summary["pbt"].get("schedule") or {}).items())
    changes = ", ".join(f"{name} {len(v)} value(s)" for name, v in schedule)
    note = (
        f"{file}: a population-based training run of {len(raw)} members, reported as one "
        f"population: its best member (member {best}, {score} {raw[best]:.4g}; the population's "
        f"range {min(finite):.4g} to {max(finite):.4g}); its members copy each other's weights, "
        "so they are not seeds" + (f"; the best agent's schedule: {changes}" if changes else "")
    )
    return [record], [note]


def _sweep_records(
    file: Path, summary: dict, published: dict, score: str, setting: str | int | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """`records_of` for a sweep: a record per setting, or the one `setting` names."""
    settings, members = summary["num_settings"], summary.get("members")
    if (
        not isinstance(members, list)
        or len(members) != settings
        or not all(isinstance(m, dict) and isinstance(m.get("hp"), dict) for m in members)
    ):
        raise ReportError(f"{file}: a sweep of {settings} settings without a result per setting")
    best = (summary.get("best") or {}).get("index")
    figures_of = best if isinstance(best, int) else 0  # the setting summary.json's figures are of
    only = f"summary.json keeps episode figure {score!r} of its best setting only"
    if setting is not None:
        index = _chosen(file, setting, best, settings)
        if score != "return" and index != figures_of:
            raise ReportError(f"{file}: {only} (setting {figures_of}), not of setting {index}")
        raw = _per_seed(file, summary, score) if score != "return" else members[index]
        how = (
            "the best, chosen by --setting best on the seeds it reports (chosen and measured "
            "on the same seeds, its score is biased upwards: confirm it on other seeds)"
            if setting == "best"
            else "chosen by --setting"
        )
        label = setting_text(members[index]["hp"])
        note = f"{file}: setting {index} of {settings} ({label}), {how}"
        return [_run_record(file, summary, published, raw, score, index)], [note]
    split = (
        f"{file}: a sweep of {settings} settings, each reported as an algorithm of its own, "
        f"`{summary['algorithm']} (name=value)` (--setting N or best reports one)"
    )
    records, notes = [], [split]
    for index, member in enumerate(members):
        label = setting_text(member["hp"])
        if score != "return" and index != figures_of:
            notes.append(f"{file}: setting {index} ({label}) left out: {only}")
            continue
        raw = _per_seed(file, summary, score) if score != "return" else member
        try:
            records.append(_run_record(file, summary, published, raw, score, index, label))
        except NoFinishedSeed:
            notes.append(f"{file}: setting {index} ({label}) left out: no seed finished an episode")
    if not records:
        raise ReportError(f"{file}: no setting of its sweep finished an episode")
    return records, notes


def _chosen(file: Path, setting: str | int, best: Any, settings: int) -> int:
    """The index `--setting` names in a sweep of `settings` settings."""
    if setting == "best":
        if not isinstance(best, int) or not 0 <= best < settings:
            raise ReportError(f"{file}: --setting best: no setting finished an episode")
        return best
    if not 0 <= int(setting) < settings:
        raise ReportError(
            f"--setting {setting}: {file} is a sweep of {settings} settings (0 to {settings - 1})"
        )
    return int(setting)


class NoFinishedSeed(ReportError):
    """Every seed's score of a run (or of a setting) is missing or not finite."""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond any float
        return False


def _run_record(
    file: Path,
    summary: dict,
    published: dict,
    raw: Any,
    score: str = "return",
    setting: int | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """A run's (or with `label`, one setting's) algorithm, task, finite per-seed scores (`raw`:
    a list, or a sweep member's `final_return_per_seed`) and provenance."""
    if isinstance(raw, dict):
        raw = raw.get("final_return_per_seed")
        if not isinstance(raw, list) or not raw:
            raise ReportError(f"{file}: setting {setting} has no final_return_per_seed")
    what = "final_return_per_seed" if score == "return" else f"episode figure {score!r}"
    if not all(v is None or _number(v) for v in raw):
        raise ReportError(f"{file}: {what} holds a value that is not a number")
    scores = [float(v) for v in raw if v is not None and _finite(v)]
    if not scores:
        which = f"setting {setting}: " if setting is not None else ""
        raise NoFinishedSeed(
            f"{file}: {which}no seed finished an episode ({score} per seed: {raw})"
        )
    task = published.get("task") or summary.get("env")
    if not isinstance(task, str):
        raise ReportError(f"{file}: names no task (no 'task' and no env in its summary)")
    # A published cell may name its table row (ppo_rnn: PPO with a recurrent policy).
    algorithm = published.get("algorithm") or summary["algorithm"]
    if not isinstance(algorithm, str):
        raise ReportError(f"{file}: its 'algorithm' is not a name")
    steps = summary.get("total_env_steps")
    return {
        "path": str(file),
        "algorithm": f"{algorithm} ({label})" if label is not None else algorithm,
        "task": task,
        "setting": setting,
        "scores": scores,
        "dropped_seeds": len(raw) - len(scores),
        "total_env_steps": steps if type(steps) is int else None,
        "command": published.get("command"),
        "date": published.get("date"),
    }
