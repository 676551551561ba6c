"""YAML configuration files and `key=value` overrides, read into plain dicts (no validation:
that is `rlax_trpo.config`'s). Every problem is a one-line ConfigError."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from rlax_trpo.config.defaults import find_config
from rlax_trpo.errors import ConfigError


def merge_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of `base` with dotted keys (`hp.learning_rate`) set to values."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for dotted, value in overrides.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return out


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Parse `key=value` strings; values are read as YAML scalars/lists (`[64,64]`, `true`)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key=value (e.g. hp.learning_rate=1e-3)")
        try:
            value = yaml.load(text, Loader=_UniqueKeyLoader) if text else ""  # noqa: S506
        except _DuplicateKey as err:
            raise ConfigError(f"override {item!r}: {err}") from None
        except yaml.YAMLError:
            value = text
        if isinstance(value, str):
            value = _maybe_number(value)
        out[key.strip()] = value
    return out


def _maybe_number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text
    integral = value.is_integer() and "e" not in text.lower() and "." not in text
    return int(value) if integral else value


class _DuplicateKey(Exception):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (plain YAML keeps
    the last, silently dropping the first: a second `hp:` would lose the first's values)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise _DuplicateKey(f"key {key!r} appears twice (line {line})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's floats with an exponent and no dot or no exponent sign (`1e-3`, `1.0e38`), which
# PyYAML's YAML 1.1 rules read as strings: in a file and inside an override's mapping too.
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from a file or a bundled config's name; a missing, unreadable or
    malformed one (duplicate keys included) raises a one-line ConfigError."""
    path = find_config(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506
    except UnicodeDecodeError:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text") from None
    except _DuplicateKey as err:
        raise ConfigError(f"config file {str(path)!r}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {str(path)!r} is not valid YAML{where}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(path)!r} must hold a mapping of keys, not a {type(data).__name__}"
        )
    return data
