"""The YAML configurations shipped inside the package, found by name.

The default run (`rlax-trpo train` with no config) is `Config.create()`: every field's
default, declared once on the field (`rlax_trpo.config`, the algorithms' sections).
"""

from __future__ import annotations

import re
from pathlib import Path

from rlax_trpo.errors import ConfigError

# The bundled configurations (`configs/` in a checkout links here), found by name.
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def bundled_config_names() -> list[str]:
    """The names of the configurations shipped with the package (`ppo_cartpole`, ...)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def find_config(name_or_path: str | Path) -> Path:
    """A YAML file: a path that exists, else a bundled configuration by name (with or without
    `.yaml`), from any working directory. Anything else raises a one-line ConfigError: a
    directory, a file that does not exist, or an unknown name with the nearest bundled one."""
    import difflib

    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.is_dir():
        raise ConfigError(f"config {str(path)!r} is a directory; give a YAML file or a config name")
    bare = path.parent == Path(".") and path.suffix in ("", ".yaml")
    if bare and (CONFIG_DIR / f"{path.stem}.yaml").is_file():
        return CONFIG_DIR / f"{path.stem}.yaml"
    close = difflib.get_close_matches(path.stem, bundled_config_names(), n=1, cutoff=0.7)
    hint = f"did you mean {close[0]}? " if close else ""
    what = (
        f"config {str(name_or_path)!r}: no bundled config of that name"
        if bare and not path.suffix
        else f"config file {str(path)!r}: no such file"
    )
    raise ConfigError(f"{what} ({hint}`rlax-trpo configs` lists the bundled ones)")


def bundled_config_table() -> str:
    """`rlax-trpo configs`: a line per bundled configuration (name, algorithm, environment or
    task, budget, and the first line of the file's own description), in columns."""
    import yaml

    rows = []
    for name in bundled_config_names():
        text = (CONFIG_DIR / f"{name}.yaml").read_text()
        raw = yaml.safe_load(text) or {}
        steps, iterations = raw.get("total_env_steps"), raw.get("num_iterations")
        budget = f"{_short(steps)} steps" if steps else f"{iterations} iterations"
        first = next((line for line in text.splitlines() if line.startswith("#")), "#")
        about = re.split(r" \(|[:;]|\. ", first.lstrip("# "))[0].rstrip(",. ")
        about = about if len(about) <= 60 else about[:59].rsplit(" ", 1)[0] + " ..."
        task = str(raw.get("env", raw.get("task", "")))
        rows.append((name, str(raw.get("algorithm", "ppo")), task, budget, about))
    lines = [("name", "algorithm", "env or task", "budget", "what it is"), *rows]
    widths = [max(len(row[i]) for row in lines) for i in range(4)]
    return "".join(
        "  ".join(f"{cell:{widths[i]}s}" for i, cell in enumerate(row[:4])) + f"  {row[4]}\n"
        for row in lines
    )


def _short(steps: float) -> str:
    """200000 -> 200k, 10000000 -> 10M."""
    steps = int(steps)
    for unit, size in (("M", 10**6), ("k", 10**3)):
        if steps >= size and steps % (size // 10) == 0:
            return f"{steps / size:g}{unit}"
    return str(steps)
