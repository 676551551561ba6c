"""The YAML configurations shipped inside the package, found by name.

The default run (`rlax-trpo train` with no config) is `Config.create()`: every field's
default, declared once on the field (`rlax_trpo.config`, the algorithms' sections).
"""

from __future__ import annotations

from pathlib import Path

from rlax_trpo.errors import ConfigError

# The bundled configurations (`configs/` in a checkout links here), found by name.
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def bundled_config_names() -> list[str]:
    """The names of the configurations shipped with the package (`ppo_cartpole`, ...)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def find_config(name_or_path: str | Path) -> Path:
    """A YAML file: a path that exists, else a bundled configuration by name (with or without
    `.yaml`), from any working directory. Unknown names raise a one-line ConfigError."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.parent == Path(".") and path.suffix in ("", ".yaml"):
        bundled = CONFIG_DIR / f"{path.stem}.yaml"
        if bundled.is_file():
            return bundled
        names = ", ".join(bundled_config_names())
        raise ConfigError(
            f"config {str(name_or_path)!r} is neither a file nor a bundled config ({names})"
        )
    raise ConfigError(f"config file {str(path)!r} does not exist")


def bundled_config_table() -> str:
    """`rlax-trpo configs`: a line per bundled configuration (name, algorithm, environment
    or task), in columns as wide as their longest entry."""
    import yaml

    rows = []
    for name in bundled_config_names():
        raw = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text()) or {}
        rows.append(
            (name, str(raw.get("algorithm", "ppo")), str(raw.get("env", raw.get("task", ""))))
        )
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "".join(f"{a:{widths[0]}s}  {b:{widths[1]}s}  {c}\n" for a, b, c in rows)
