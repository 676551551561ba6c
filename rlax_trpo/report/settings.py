"""Which inputs of one (algorithm, task) cell ran the same settings. `rlax-trpo report` pools
the seeds of runs that did (four single-seed runs of one config are one 4-seed row) and gives
runs that did not a row each, named by what differs: `ppo (layer_norm=true)` beside
`ppo (layer_norm=false)`, so that a folder of pilots is never averaged into one row.

A run's settings are its resolved config (every field), read from the run folder's
config.yaml, from a published result's `config` (`benchmarks/standard_tables.py` writes it),
or, for a result published without one, by resolving its `command` (`--config` and the
`key=value` overrides) against the config file it names, found from the working directory or
a folder above the result, or bundled. Two runs agree when every field both have is equal (a
field one lacks was added to the library later). A run whose settings cannot be read is pooled
with the others, or, where they split, reported as `algorithm (settings unknown)`; a note says
which. A population-based training run's `pbt:` section is a setting like any other: it
never pools with a run without one.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from rlax_trpo.errors import ConfigError

# Fields that change how a result is computed, not what it is (TRPO's line search gives
# the same step whether its candidates are evaluated all at once or batch by batch): runs that
# differ only in them pool.
HOW_NOT_WHAT = frozenset({"line_search_batch"})


def setting_text(hp: dict[str, Any]) -> str:
    """A setting's values, as a run's plots name it: `learning_rate=0.001,clip_eps=0.1`."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    return ",".join(
        f"{str(k).removeprefix('hp.')}={v:g}" if number(v) else f"{k}={v}" for k, v in hp.items()
    )


def settings_of(run: dict[str, Any]) -> dict[str, Any] | None:
    """The flattened resolved config (`hp.max_kl`, ...) of a report record, less the fields in
    `HOW_NOT_WHAT`, or None when it cannot be read."""
    path = Path(run["path"])
    try:
        if path.name == "summary.json":
            raw = yaml.safe_load((path.parent / "config.yaml").read_text())
        else:
            published = json.loads(path.read_text())
            raw = published.get("config") or _resolve(path, published.get("command"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(raw, dict):
        return None
    return {k: v for k, v in _flatten(raw).items() if k not in HOW_NOT_WHAT}


def _resolve(path: Path, command: Any) -> dict[str, Any] | None:
    """The config `command` trains (`python train.py --config FILE k=v ...`), resolved as the
    command line resolves it; None when the file is not found or does not resolve."""
    if not isinstance(command, str):
        return None
    tokens = shlex.split(command)
    config, overrides, i = None, [], 0
    while i < len(tokens):  # `--config FILE`, `key=value`; options and their values aside
        token = tokens[i]
        if token in ("--config", "--sweep") and i + 1 < len(tokens):
            config = tokens[i + 1] if token == "--config" else config
            i += 2
            continue
        if token.startswith("--config="):
            config = token.split("=", 1)[1]
        elif "=" in token and not token.startswith("-"):
            overrides.append(token)
        i += 1
    if config is None:
        return None
    where = [Path(config), *(parent / config for parent in path.resolve().parents)]
    found = next((p for p in where if p.is_file()), config)  # else a bundled config's name
    try:
        from rlax_trpo.config.configuration import load_config  # imports JAX: only here

        return load_config(found, overrides).to_dict()
    except (ConfigError, ImportError, OSError, ValueError):  # settings unknown
        return None


# a section's own key, beside its fields: `pbt: {...}` never agrees with `pbt: null`
SECTION = "set"


def _flatten(raw: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"hp": {"lr": 1}}` -> `{"hp": "set", "hp.lr": 1}`: a section keeps a key of its own,
    so that a run with it (`pbt.*`) and a run without (`pbt: null`) share a key that differs."""
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, dict) and value:
            flat[f"{prefix}{key}"] = SECTION
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _agree(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _text(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def split_by_settings(runs: list[dict[str, Any]]) -> list[str]:
    """Rename, in place, the runs of each (algorithm, task) that ran different settings to
    `algorithm (key=value, ...)`, the fields in which their groups differ; and notes."""
    notes: list[str] = []
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["algorithm"], run["task"]), []).append(run)
    for (algo, task), group in cells.items():
        if len(group) > 1:
            notes += _split_cell(algo, task, group)
    return notes


def _split_cell(algo: str, task: str, cell: list[dict[str, Any]]) -> list[str]:
    """`split_by_settings` for the runs of one cell."""
    groups: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    unknown = []
    for run in cell:
        settings = settings_of(run)
        home = (
            None if settings is None else next((g for g in groups if _agree(g[0], settings)), None)
        )
        if settings is None:
            unknown.append(run)
        elif home is None:
            groups.append((settings, [run]))
        else:
            home[1].append(run)
    if len(groups) < 2:
        return [
            f"{run['path']}: its settings could not be read; pooled with {algo}" for run in unknown
        ]
    differ = sorted(
        k
        for k in set().union(*(s for s, _ in groups))
        if len({_text(s[k]) for s, _ in groups if k in s}) > 1
    )
    for settings, members in groups:
        for run in members:
            run["algorithm"] = f"{algo} ({_label(settings, differ, groups)})"
    for run in unknown:
        run["algorithm"] = f"{algo} (settings unknown)"
    said = f"{algo} on {task}: its inputs ran {len(groups)} different settings, each reported"
    said += f" as a row of its own (they differ in {', '.join(differ)})"
    unread = "its settings could not be read; reported as"
    return [said, *(f"{run['path']}: {unread} {algo} (settings unknown)" for run in unknown)]


def _label(settings: dict[str, Any], differ: list[str], groups: list) -> str:
    """The fields of `differ` a group has, with its values: the first four, or all of them
    where another group shows the same first four (the two differ further on), so that two
    groups never share a row."""
    shown = [k for k in differ if k in settings]
    first = lambda s: [(k, _text(s[k])) for k in differ if k in s][:4]
    if sum(first(other) == first(settings) for other, _ in groups) > 1:
        return ", ".join(f"{k}={_text(settings[k])}" for k in shown)
    return ", ".join(f"{k}={v}" for k, v in first(settings)) + (", ..." if len(shown) > 4 else "")


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
    return cells, notes + _budget_notes(by_cell)


def _budget_notes(by_cell: dict[tuple[str, str], list[dict]]) -> list[str]:
    """A note per task whose rows ran different budgets (env steps per seed): their scores
    are not of one budget, so the comparison is not like for like."""
    notes = []
    for task in sorted({task for _, task in by_cell}):
        budgets = {
            algo: sorted({r["total_env_steps"] for r in group}, key=str)
            for (algo, t), group in sorted(by_cell.items())
            if t == task
        }
        if len({tuple(b) for b in budgets.values()}) > 1:
            said = ", ".join(
                f"{algo} {' / '.join(f'{b:,}' if b else 'unknown' for b in steps)}"
                for algo, steps in budgets.items()
            )
            notes.append(
                f"{task}: its rows ran different budgets (env steps per seed: {said}); "
                "they do not compare like for like"
            )
    return notes
