"""What every benchmark's JSON records beside its figures, and how it is written."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any


def publish(name: str, figures: dict[str, Any], path: Path | None) -> None:
    """Print `figures` with the date, machine, jax version and command; also write them to
    `path` (for benchmarks/results/) when given."""
    import jax

    result = {
        "benchmark": name,
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
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
