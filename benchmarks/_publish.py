"""What every benchmark's JSON records beside its figures, and how it is written."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def machine() -> str:
    """The machine a figure was measured on: architecture, core count and CPU model."""
    from rlax_trpo.platform import cpu_name

    return f"{platform.machine()}, {os.cpu_count()} cores, {cpu_name()}"


def fresh_process_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a fresh `train.py` process that a benchmark times: this one's without
    XLA_FLAGS (no forced device count; XLA's default code) and without the per-user
    compilation cache (`compile_seconds` is a compile from nothing), plus `extra`. A smoke run
    (benchmarks/smoke.py), whose figures mean nothing, passes its compile flags on through
    RLAX_TRPO_CHILD_XLA_FLAGS and keeps its cache."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if os.environ.get("RLAX_TRPO_CHILD_XLA_FLAGS"):
        env["XLA_FLAGS"] = os.environ["RLAX_TRPO_CHILD_XLA_FLAGS"]
    else:
        env["RLAX_TRPO_COMPILE_CACHE"] = "0"
    if "XLA_FLAGS" in extra and "XLA_FLAGS" in env:
        extra = {**extra, "XLA_FLAGS": f"{env['XLA_FLAGS']} {extra['XLA_FLAGS']}"}
    return env | extra


def publish(name: str, figures: dict[str, Any], path: Path | None) -> None:
    """Print `figures` with the date, machine, jax version and command; also write them to
    `path` (for benchmarks/results/) when given."""
    import jax

    result = {
        "benchmark": name,
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "jax": jax.__version__,
        "command": "python " + " ".join(sys.argv),
        **figures,
    }
    text = json.dumps(
        result, indent=1, default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x)
    )
    print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
