#!/usr/bin/env python
"""Check that no published table cell shares a seed with a committed run of another setting.

A published cell (a result of `benchmarks/standard_tables.py` under one of `TABLES`' folders)
reports seeds that must not have chosen its setting: no other committed run of the same task
and algorithm, at any other setting, may have used any of them. Tuning runs (sweeps, pilots)
take seeds below 1000; confirmation runs, the ones tables publish, take 1000 and up.

    python tools/seed_check.py            # every violation, one line each; exit 1 if any
    python tools/seed_check.py --json     # the same as JSON

Every JSON under `benchmarks/results/` whose `command` runs `train.py` or `standard_tables.py`
is a run: its task and algorithm (the file's `task`/`algorithm`, else its summary's `env` and
`algorithm`), its seeds (`--seed S`, default 0, and the summary's `num_seeds`) and its setting:
the command's config file and `key=value` overrides (the last value of a key), its `--sweep`
values, and the summary's iterations and env steps (a config file that changed between two
runs of one command shows in them). Two copies of one run (the same setting and seeds in two
folders) are one run.

Rows of a table that prints every file of its folder (`EVERY_FILE_A_ROW`) are all shown, so
they do not count against each other.

`PENDING` names the cells that are known to break the rule and are marked so where they are
published; the check fails on any other cell that breaks it, and on a pending cell that no
longer does (take it off the list).

Only the standard library.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TABLES = ("minatar", "craftax", "bundled_2core")  # folders of published cells
# Tables that print every file of their folder as a row of its own: there, two rows on the same
# seeds stand side by side (a memory policy and its feed-forward twin, two bundled PPO configs
# of one task), so neither chose the other, and they do not count against each other.
EVERY_FILE_A_ROW = ("bundled_2core",)

# (table, file stem) -> why the cell still reports seeds that chose settings. Each is marked
# in the table that publishes it.
GPU_NEEDED = "Craftax-1M runs need a GPU; re-run on seeds 1000 and up"
PENDING = {
    ("craftax", "ppo_Craftax-Symbolic-v1"): GPU_NEEDED,
    ("craftax", "ppo_rnn_Craftax-Symbolic-v1"): GPU_NEEDED,
    ("craftax", "trpo_Craftax-Symbolic-v1"): GPU_NEEDED,
    ("craftax", "trpo_rnn_Craftax-Symbolic-v1"): GPU_NEEDED,
}

# options that say how or where a run ran, not what it ran
IGNORED_OPTIONS = {"--out", "--results", "--runs", "--chunk-iterations", "--devices", "--timeout"}
IGNORED_FLAGS = {"--no-progress", "--resume"}


def setting_and_seed(command: str) -> tuple[dict, int]:
    """A command's setting (config, overrides, sweeps, table options) and its first seed."""
    tokens = shlex.split(command)
    script = next((i for i, t in enumerate(tokens) if t.endswith(".py")), None)
    tokens = tokens[script + 1 :] if script is not None else tokens
    overrides: dict[str, str] = {}
    setting: dict = {"overrides": overrides, "sweeps": [], "options": {}}
    seed, i = 0, 0
    while i < len(tokens):
        token = tokens[i]
        value = tokens[i + 1] if i + 1 < len(tokens) else None
        if token == "--seed":
            seed, i = int(value), i + 2
        elif token == "--seeds":
            i += 2  # the summary's num_seeds says how many
        elif token == "--config":
            setting["config"] = Path(value).stem
            i += 2
        elif token == "--sweep":
            setting["sweeps"].append(value)
            i += 2
        elif token in IGNORED_OPTIONS:
            i += 2
        elif token in IGNORED_FLAGS:
            i += 1
        elif token.startswith("--"):  # a table option (--algos ppo, --games X, --budget N)
            values = []
            i += 1
            while i < len(tokens) and not tokens[i].startswith("--") and "=" not in tokens[i]:
                values.append(tokens[i])
                i += 1
            setting["options"][token] = values
        elif "=" in token:
            key, val = token.split("=", 1)
            overrides[key] = val
            i += 1
        else:  # a positional word (the table's name)
            setting["options"].setdefault("", []).append(token)
            i += 1
    return setting, seed


def runs(results: Path = RESULTS) -> list[dict]:
    """Every committed run under `results`, one record each (copies merged)."""
    found: dict[tuple, dict] = {}
    for path in sorted(results.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("command"), str):
            continue
        command = data["command"]
        if "train.py" not in command and "standard_tables.py" not in command:
            continue
        summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
        task = data.get("task") or summary.get("env")
        algorithm = data.get("algorithm") or summary.get("algorithm")  # a table row's name first
        if not isinstance(task, str) or not isinstance(algorithm, str):
            continue
        setting, first = setting_and_seed(command)
        setting["overrides"].pop("env", None)  # the task, already in the key
        setting["iterations"] = summary.get("num_iterations")
        setting["env_steps"] = summary.get("total_env_steps")
        count = summary.get("num_seeds") if type(summary.get("num_seeds")) is int else 1
        table = path.parent.name if path.parent.parent == results else None
        record = {
            "path": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
            "task": task,
            "algorithm": algorithm,
            "seeds": list(range(first, first + count)),
            "setting": setting,
            "published": (table, path.stem) if table in TABLES else None,
        }
        key = (task, algorithm, json.dumps(setting, sort_keys=True), tuple(record["seeds"]))
        if key in found:  # a copy of a run already seen: published if either copy is
            found[key]["published"] = found[key]["published"] or record["published"]
            continue
        found[key] = record
    return list(found.values())


def _rows_of_one_table(cell: dict, other: dict) -> bool:
    """Both are published rows of one `EVERY_FILE_A_ROW` table."""
    table = cell["published"][0]
    return table in EVERY_FILE_A_ROW and (other["published"] or (None,))[0] == table


def violations(records: list[dict]) -> list[dict]:
    """Each published cell that shares a seed with a run of another setting of its task and
    algorithm, with those runs."""
    out = []
    for cell in records:
        if cell["published"] is None:
            continue
        clashes = [
            other
            for other in records
            if other is not cell
            and (other["task"], other["algorithm"]) == (cell["task"], cell["algorithm"])
            and other["setting"] != cell["setting"]
            and set(other["seeds"]) & set(cell["seeds"])
            and not _rows_of_one_table(cell, other)
        ]
        if clashes:
            out.append(
                {
                    "cell": cell["path"],
                    "published": cell["published"],
                    "seeds": cell["seeds"],
                    "shared_with": [
                        {"path": c["path"], "seeds": sorted(set(c["seeds"]) & set(cell["seeds"]))}
                        for c in clashes
                    ],
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    found = violations(runs(args.results))
    broken = {tuple(v["published"]) for v in found}
    unexpected = [v for v in found if tuple(v["published"]) not in PENDING]
    cleared = sorted(set(PENDING) - broken) if args.results == RESULTS else []
    if args.json:
        print(json.dumps({"violations": found, "pending": [list(k) for k in PENDING]}, indent=1))
    else:
        for v in found:
            shared = ", ".join(
                f"{s['path']} (seeds {min(s['seeds'])}-{max(s['seeds'])})"
                for s in v["shared_with"][:3]
            )
            more = len(v["shared_with"]) - 3
            pending = PENDING.get(tuple(v["published"]))
            status = f"pending: {pending}" if pending else "NOT ALLOWED"
            print(
                f"{v['cell']}: seeds {min(v['seeds'])}-{max(v['seeds'])} also ran other settings: "
                f"{shared}{f' and {more} more' if more > 0 else ''} [{status}]"
            )
        for key in cleared:
            print(f"{'/'.join(key)}: on PENDING but shares no seed any more: take it off")
        print(
            f"{len(found)} published cell(s) share seeds with other settings; "
            f"{len(unexpected)} not pending"
        )
    return 1 if unexpected or cleared else 0


if __name__ == "__main__":
    sys.exit(main())
