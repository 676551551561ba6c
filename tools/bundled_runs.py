#!/usr/bin/env python
"""Train every bundled config at a tiny budget, and compare two such sets of runs.

    python tools/bundled_runs.py run OUTDIR [--only NAME ...] [--jobs 1] [--timeout S]
    python tools/bundled_runs.py compare DIR_A DIR_B [--rename OLD=NEW ...] [--ignore COLUMN ...]

`run` trains each bundled config (`rlax_trpo.config.defaults.bundled_config_names()`, else
`configs/*.yaml`) and the embedded default (no `--config`, named `_default`) in a fresh
subprocess of this checkout:

    python train.py [--config NAME] --out OUTDIR/NAME --no-progress --seeds 2 --devices 1 \
        <tiny budget>

The tiny budget is two iterations: `total_env_steps=2*num_envs*num_steps eval_episodes=2`
for control configs (an iteration of every control algorithm, GRPO included, is
`num_envs x num_steps` steps: N*G grouped episodes over a horizon T for GRPO), and
`num_iterations=2 eval_size=16 eval_every=1 warm_start_steps=2` (0 if the YAML has 0) for
`algorithm: grpo_lm`. Each run's exit status, wall time, command and the last lines of its
output go to OUTDIR/runs.json; its full output to OUTDIR/_logs/NAME.log.

`compare` checks, for every config present in both folders, metrics.csv byte for byte, else
as tables (the same rows; columns matched by name after renaming A's metric columns with
`--rename`), naming each column that differs with its max abs difference; and config.yaml as
parsed YAML (keys added, removed, changed). It exits 0 only when every metrics table compared
is identical and no config that has one in one folder lacks it in the other.
metrics.csv holds no wall-clock column (seed, iteration, env_steps, then the compiled
training metrics), so nothing is excluded unless `--ignore` says so.

Only the standard library, PyYAML (a dependency of the package) and the package.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's rlax_trpo, whatever is installed
DEFAULT_NAME = "_default"
LOG_DIR = "_logs"
MANIFEST = "runs.json"


class UsageError(Exception):
    pass


# ---------------------------------------------------------------------------------------- run


def config_names() -> list[str]:
    try:
        from rlax_trpo.config.defaults import bundled_config_names
    except ImportError:  # the package moved it: fall back to the checkout's folder
        return sorted(p.stem for p in (REPO / "configs").glob("*.yaml"))
    return bundled_config_names()


def read_raw(name: str) -> dict:
    """The raw YAML mapping of a bundled config, or the embedded default's for `_default`."""
    import yaml

    if name == DEFAULT_NAME:
        try:
            from rlax_trpo.config.defaults import DEFAULT_CONFIG
        except ImportError:  # documented as the same run as the bundled ppo_cartpole
            return read_raw("ppo_cartpole")
        return dict(DEFAULT_CONFIG)
    try:
        from rlax_trpo.config.defaults import CONFIG_DIR
    except ImportError:
        CONFIG_DIR = REPO / "configs"
    path = Path(CONFIG_DIR) / f"{name}.yaml"
    if not path.is_file():
        path = REPO / "configs" / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) or {}


def tiny_overrides(raw: dict) -> list[str]:
    """`key=value` overrides for about two iterations, using only keys the config's kind reads."""
    if raw.get("algorithm") == "grpo_lm":
        warm = 2 if raw.get("warm_start_steps", 0) > 0 else 0
        return ["num_iterations=2", "eval_size=16", "eval_every=1", f"warm_start_steps={warm}"]
    # Control (vpg/npg/trpo/ppo/grpo): one iteration is num_envs x num_steps env steps.
    num_envs, num_steps = raw.get("num_envs", 4), raw.get("num_steps", 128)
    return [f"total_env_steps={2 * num_envs * num_steps}", "eval_episodes=2"]


def command(name: str, outdir: Path) -> list[str]:
    cmd = [sys.executable, "train.py"]
    if name != DEFAULT_NAME:
        cmd += ["--config", name]
    cmd += ["--out", str(outdir / name), "--no-progress", "--seeds", "2", "--devices", "1"]
    return cmd + tiny_overrides(read_raw(name))


def run_one(name: str, outdir: Path, timeout: float) -> dict:
    cmd = command(name, outdir)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    log = outdir / LOG_DIR / f"{name}.log"
    t0 = time.perf_counter()
    with log.open("w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            proc = subprocess.run(
                cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
            )
            code, timed_out = proc.returncode, False
        except subprocess.TimeoutExpired:
            code, timed_out = None, True
    wall = time.perf_counter() - t0
    lines = [ln for ln in log.read_text().splitlines()[1:] if ln.strip()]
    ok = code == 0 and (outdir / name / "metrics.csv").is_file()
    return {
        "name": name,
        "command": cmd[1:],  # without the interpreter's path
        "returncode": code,
        "timed_out": timed_out,
        "wall_s": round(wall, 1),
        "ok": ok,
        "tail": lines[-5:],
    }


def run_main(args: argparse.Namespace) -> int:
    names = [DEFAULT_NAME, *config_names()]
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            raise UsageError(f"--only: unknown config(s) {', '.join(unknown)}")
        names = [n for n in names if n in args.only]
    if args.jobs != 1:
        raise UsageError(f"--jobs: only 1 is supported (got {args.jobs}); runs share the CPU")
    outdir = args.outdir.resolve()
    busy = [n for n in names if (outdir / n).exists() and any((outdir / n).iterdir())]
    if busy:
        raise UsageError(f"{outdir}: run folders already hold files: {', '.join(busy)}")
    (outdir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    manifest = outdir / MANIFEST
    records = json.loads(manifest.read_text()) if manifest.is_file() else {}
    for name in names:
        print(f"{name:36s} ...", end="", flush=True)
        rec = run_one(name, outdir, args.timeout)
        records[name] = rec
        manifest.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        status = "ok" if rec["ok"] else ("TIMEOUT" if rec["timed_out"] else "FAILED")
        print(f" {status:7s} rc={rec['returncode']} {rec['wall_s']:7.1f} s", flush=True)
        if not rec["ok"] and rec["tail"]:
            print(f"    {rec['tail'][-1]}", flush=True)
    failed = [n for n in names if not records[n]["ok"]]
    print(f"{len(names) - len(failed)}/{len(names)} succeeded" +
          (f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


# ------------------------------------------------------------------------------------ compare


def present(folder: Path) -> set[str]:
    """Config names a run folder holds: sub-folders and the names in its runs.json."""
    names = {p.name for p in folder.iterdir() if p.is_dir() and p.name != LOG_DIR}
    manifest = folder / MANIFEST
    if manifest.is_file():
        names |= set(json.loads(manifest.read_text()))
    return names


def read_table(path: Path, renames: dict[str, str]) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return [], []
    return [renames.get(c, c) for c in rows[0]], rows[1:]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def column_diff(a: list[str], b: list[str]) -> str | None:
    """None when the two columns are equal cell by cell, else a short description."""
    bad = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if not bad:
        return None
    worst, numeric = 0.0, True
    for i in bad:
        x, y = _number(a[i]), _number(b[i])
        if x is None or y is None:
            numeric = False
        elif math.isnan(x) or math.isnan(y):
            worst = math.inf if math.isnan(x) != math.isnan(y) else worst
        else:
            worst = max(worst, abs(x - y))
    size = f"max abs diff {worst:.6g}" if numeric else "non-numeric cells differ"
    i = bad[0]
    return f"{len(bad)}/{len(a)} rows differ, {size} (first: row {i + 1}: {a[i]} vs {b[i]})"


def compare_tables(path_a: Path, path_b: Path, renames: dict, ignore: set) -> list[str]:
    """Differences between two metrics.csv files as tables ([] when identical)."""
    cols_b, rows_b = read_table(path_b, {})
    # A rename applies where B no longer has the old name (metrics renamed in B's code).
    cols_a, rows_a = read_table(path_a, {k: v for k, v in renames.items() if k not in cols_b})
    problems = []
    if len(rows_a) != len(rows_b):
        problems.append(f"rows: {len(rows_a)} in A, {len(rows_b)} in B")
    only_a = [c for c in cols_a if c not in cols_b and c not in ignore]
    only_b = [c for c in cols_b if c not in cols_a and c not in ignore]
    if only_a:
        problems.append(f"columns only in A: {', '.join(only_a)}")
    if only_b:
        problems.append(f"columns only in B: {', '.join(only_b)}")
    if any(len(r) != len(cols_a) for r in rows_a) or any(len(r) != len(cols_b) for r in rows_b):
        return [*problems, "ragged rows: a row's length differs from its header's"]
    n = min(len(rows_a), len(rows_b))
    for col in cols_a:
        if col in ignore or col not in cols_b:
            continue
        ia, ib = cols_a.index(col), cols_b.index(col)
        diff = column_diff([r[ia] for r in rows_a[:n]], [r[ib] for r in rows_b[:n]])
        if diff:
            problems.append(f"column {col}: {diff}")
    return problems


def flatten(d: object, prefix: str = "") -> dict[str, object]:
    if not isinstance(d, dict):
        return {prefix or "<root>": d}
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


def compare_configs(path_a: Path, path_b: Path) -> list[str]:
    import yaml

    a = flatten(yaml.safe_load(path_a.read_text()))
    b = flatten(yaml.safe_load(path_b.read_text()))
    lines = [f"config.yaml: removed {k} (was {a[k]!r})" for k in sorted(a.keys() - b.keys())]
    lines += [f"config.yaml: added {k}: {b[k]!r}" for k in sorted(b.keys() - a.keys())]
    lines += [
        f"config.yaml: changed {k}: {a[k]!r} -> {b[k]!r}"
        for k in sorted(a.keys() & b.keys())
        if a[k] != b[k]
    ]
    return lines


def compare_one(name: str, a: Path, b: Path, renames: dict, ignore: set) -> tuple[str, list]:
    """('identical' | 'different' | 'not compared', report lines) for one config."""
    ma, mb = a / name / "metrics.csv", b / name / "metrics.csv"
    lines = []
    ca, cb = a / name / "config.yaml", b / name / "config.yaml"
    if ca.is_file() and cb.is_file():
        lines += compare_configs(ca, cb)
    if not ma.is_file() and not mb.is_file():
        return "not compared", [*lines, "no metrics.csv in either folder"]
    if not ma.is_file() or not mb.is_file():
        return "different", [*lines, f"metrics.csv missing in {'A' if mb.is_file() else 'B'}"]
    if not renames and not ignore and ma.read_bytes() == mb.read_bytes():
        return "identical", lines
    problems = compare_tables(ma, mb, renames, ignore)
    if problems:
        return "different", [*lines, *problems]
    note = "metrics.csv: equal as tables" + (" after renames" if renames else "")
    return "identical", [*lines, note] if ma.read_bytes() != mb.read_bytes() else lines


def compare_main(args: argparse.Namespace) -> int:
    for folder in (args.dir_a, args.dir_b):
        if not folder.is_dir():
            raise UsageError(f"{str(folder)!r} is not a directory")
    renames = {}
    for item in args.rename:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise UsageError(f"--rename: expected OLD=NEW (got {item!r})")
        renames[old] = new
    ignore = set(args.ignore)
    names_a, names_b = present(args.dir_a), present(args.dir_b)
    for label, only in (("A", names_a - names_b), ("B", names_b - names_a)):
        if only:
            print(f"only in {label} (not compared): {', '.join(sorted(only))}")
    counts = {"identical": 0, "different": 0, "not compared": 0}
    for name in sorted(names_a & names_b):
        verdict, lines = compare_one(name, args.dir_a, args.dir_b, renames, ignore)
        counts[verdict] += 1
        print(f"{name:36s} {verdict}")
        for line in lines:
            print(f"    {line}")
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0 if counts["identical"] and not counts["different"] else 1


# --------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:
            raise UsageError(message)

    p = Parser(prog="bundled_runs.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    r = sub.add_parser("run", help="train every bundled config at a tiny budget")
    r.add_argument("outdir", type=Path)
    r.add_argument("--only", nargs="+", metavar="NAME", help="these configs only (_default too)")
    r.add_argument("--jobs", type=int, default=1, help="runs at once (1)")
    r.add_argument("--timeout", type=float, default=2400, help="seconds per run (2400)")
    c = sub.add_parser("compare", help="compare two folders written by `run`")
    c.add_argument("dir_a", type=Path)
    c.add_argument("dir_b", type=Path)
    c.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                   help="rename a metric column of A before comparing (repeat)")  # fmt: skip
    c.add_argument("--ignore", action="append", default=[], metavar="COLUMN",
                   help="leave a column out of the comparison (repeat)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return run_main(args) if args.command == "run" else compare_main(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
