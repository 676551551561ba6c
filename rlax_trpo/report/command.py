"""`rlax-trpo report PATH ...`: its options, and the command from them (statistics over
finished runs as rliable computes them, written to report.md, report.json and figures)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlax_trpo.errors import RunFailed
from rlax_trpo.report.aggregate import (
    RLIABLE_MISSING,
    ReportError,
    RliableMissing,
    build_report,
)
from rlax_trpo.report.render import per_task_table, write_report
from rlax_trpo.report.tables import read_anchors


def build_report_parser(
    prog: str = "rlax-trpo report", parser_class: type = argparse.ArgumentParser
) -> argparse.ArgumentParser:
    p = parser_class(
        prog=prog,
        description="Statistics over finished runs as rliable computes them, "
        "written to report.md, report.json and figures.",
    )
    add = p.add_argument
    add(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a run folder, a JSON published by "
        "benchmarks/standard_tables.py, or a folder of either",
    )
    add("--out", type=Path, default=Path("report"), metavar="DIR", help="default: report/")
    add(
        "--range",
        dest="ranges",
        action="append",
        default=[],
        metavar="TASK=LO,HI",
        help="a task's normalisation range, repeatable (default: its scores' range)",
    )
    add("--score", default="return", help="return, or an episode figure (Craftax: score_percent)")
    add(
        "--setting",
        metavar="N|best",
        help="of a sweep, report setting N (or its best) under the algorithm's name "
        "(default: each setting its own row)",
    )
    add("--anchors", type=Path, metavar="FILE.yaml", help="published scores, label: {task: score}")
    add("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    add("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add("--title", help="the report's title")
    return p


def report_command(args: Any, prog: str = "rlax-trpo report") -> int:
    """`rlax-trpo report` from its parsed options: every input checked (`ReportError`, one
    line), the statistics, the files; prints the per-task table and where the report is.
    Without rliable: one line on stderr and status 2."""
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out: {out} is a file, not a folder")
    try:
        anchors = read_anchors(args.anchors) if args.anchors else {}
        report = build_report(
            args.paths,
            args.ranges,
            args.reps,
            args.seed,
            args.score,
            getattr(args, "setting", None),
        )
    except RliableMissing as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    try:
        write_report(report, out, anchors, args.title)
    except ImportError as err:  # a library the figures need (matplotlib, seaborn)
        print(
            f"{prog}: {RLIABLE_MISSING} (drawing needs {err.name}); no report written",
            file=sys.stderr,
        )
        return 2
    except OSError as err:
        raise RunFailed(f"--out {out}: {err.strerror or err}; no report written") from None
    print(per_task_table(report, anchors))
    for note in report["notes"]:  # what was skipped, split or chosen, as report.md says
        print(f"note: {note}")
    print(f"report: {out / 'report.md'}")
    return 0
