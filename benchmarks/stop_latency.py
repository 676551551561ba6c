#!/usr/bin/env python
"""How soon a signal stops a run started without `--chunk-iterations`, and what it leaves.

Each repeat runs, each as a fresh process as a user types it:

    python train.py --out A [overrides]      uninterrupted: the reference metrics.csv
    python train.py --out B [overrides]      SIGINT (or --signal) DELAY s after its compile
                                             line; timed from the signal to the exit
    python train.py --resume B               finishes it: metrics.csv compared with A's

and records the seconds from the signal to the process's exit, its exit status, the
iterations done, which of metrics.csv, summary.json (and its `status`), learning_curve.png
and a checkpoint the stopped run left, and whether the resumed metrics.csv equals the
uninterrupted one byte for byte. The same stop with `--single-call` (one `lax.scan`, the
previous behaviour of an unchunked run) is the reference: it can only stop at the end.

    python benchmarks/stop_latency.py --json benchmarks/results/stop_latency_2core.json
    python benchmarks/stop_latency.py --repeats 1 --delay 1 total_env_steps=20000

Published: docs/operations.md (chunked, resumable runs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _publish import fresh_process_env, publish

ROOT = Path(__file__).resolve().parents[1]


def _train(argv: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "train.py", "--no-progress", *argv]
    env = fresh_process_env({})
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _finish(proc: subprocess.Popen, what: str) -> tuple[str, str]:
    out, err = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{err[-2000:]}")
    return out, err


def stopped(out: Path, overrides: list[str], delay: float, sig: int, single: bool) -> dict:
    """A run signalled `delay` s after its compile line: what the stop took and left."""
    proc = _train(["--out", str(out), *overrides, *(["--single-call"] if single else [])])
    compiled = threading.Event()
    lines: list[str] = []

    def read() -> None:  # the compile line ends in " s" once compilation is over
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("compiling ") and line.rstrip().endswith(" s"):
                compiled.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not compiled.wait(timeout=1800):
        proc.kill()
        raise RuntimeError("no compile line")
    time.sleep(delay)
    t0 = time.perf_counter()
    proc.send_signal(sig)
    err = proc.stderr.read()
    proc.wait(timeout=1800)
    took = time.perf_counter() - t0
    reader.join(timeout=10)
    ckpt = out / "checkpoint"
    record = json.loads((ckpt / (ckpt / "LATEST").read_text().strip() / "meta.json").read_text())
    summary = out / "summary.json"
    return {
        "signal_to_exit_seconds": round(took, 2),
        "exit_status": proc.returncode,
        "iterations_done": record["iterations_done"],
        "num_iterations": json.loads((ckpt / "plan.json").read_text())["num_iterations"],
        "left": {
            "metrics.csv": (out / "metrics.csv").is_file(),
            "summary.json": json.loads(summary.read_text()).get("status") if summary.is_file()
            else None,
            "learning_curve.png": (out / "learning_curve.png").is_file(),
            "checkpoint": (ckpt / "LATEST").is_file(),
        },
        # the scratch folder's path left out: the file names no machine's folders
        "last_line": (err.strip().splitlines() or [""])[-1].replace(str(out.parent), "<scratch>"),
    }  # fmt: skip


def repeat(scratch: Path, overrides: list[str], delay: float, sig: int) -> dict:
    whole = scratch / "whole"
    _finish(_train(["--out", str(whole), *overrides]), "the uninterrupted run")
    figures = {}
    for name, single in (("segments", False), ("single_call", True)):
        out = scratch / name
        figures[name] = stopped(out, overrides, delay, sig, single)
        if figures[name]["exit_status"] == 0:  # it ended before the signal: nothing to resume
            figures[name]["resumed_metrics_csv_identical"] = None
            continue
        _finish(_train(["--resume", str(out)]), f"--resume of the {name} run")
        same = (out / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()
        figures[name]["resumed_metrics_csv_identical"] = same
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--delay", type=float, default=1.0, help="seconds of training before it")
    p.add_argument("--signal", choices=("SIGINT", "SIGTERM"), default="SIGINT")
    p.add_argument("--json", type=Path)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="added to train commands")
    args = p.parse_args()
    sig = signal.Signals[args.signal]
    repeats = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="stop-latency-") as scratch:
            repeats.append(repeat(Path(scratch), args.overrides, args.delay, sig))
        print(json.dumps({"repeat": i, **repeats[-1]}), flush=True)
    seconds = {k: [r[k]["signal_to_exit_seconds"] for r in repeats] for k in repeats[0]}
    publish(
        "stop_latency",
        {"cores": os.cpu_count(), "overrides": args.overrides, "delay_seconds": args.delay,
         "signal": args.signal,
         "signal_to_exit_seconds_median": {k: statistics.median(v) for k, v in seconds.items()},
         "repeats": repeats},
        args.json,
    )  # fmt: skip


if __name__ == "__main__":
    main()
