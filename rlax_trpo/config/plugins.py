"""Plugins: modules of yours that register algorithms, environments or suites, loaded before a
configuration is validated.

Three ways to load one, all equivalent:

    rlax-trpo train --import mymod --config my.yaml      # on the command line (repeatable)
    imports: [mymod]                                     # in the YAML (recorded in config.yaml)
    [project.entry-points."rlax_trpo.plugins"]           # an installed package: loaded always
    mymod = "mymod"

A name is imported from the Python path or, failing that, the working directory (as
`python -m` would); a path ending in `.py` is imported from that file. The run folder's
config.yaml records `imports`, so `rlax-trpo eval --run`, `--resume` and `load_policy`
import the same modules again.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from rlax_trpo.errors import ConfigError

ENTRY_POINT_GROUP = "rlax_trpo.plugins"


def load_plugins(modules: Sequence[str]) -> list[ModuleType]:
    """Import each module (a name, or a path to a .py file); a missing one or one that fails
    to import is a one-line ConfigError naming it."""
    return [import_plugin(name) for name in modules]


def import_plugin(name: str) -> ModuleType:
    """Import one plugin module by name or .py path (each is imported once per process)."""
    if name.endswith(".py"):
        return _import_file(Path(name))
    if name in sys.modules:
        return sys.modules[name]
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # what `python -m` puts first; last here, so it shadows nothing
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
            raise ConfigError(
                f"imports: no module named {name!r} (not on the Python path nor in {cwd})"
            ) from None
        raise ConfigError(f"imports: {name!r} failed to import: {err}") from None
    except ConfigError:
        raise
    except Exception as err:  # a plugin's own error: name it and where it happened
        raise ConfigError(f"imports: {name!r} failed to import: {_where(err)}") from None


def _import_file(path: Path) -> ModuleType:
    resolved = path.resolve()
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == str(resolved):
            return module
    if not resolved.is_file():
        raise ConfigError(f"imports: {str(path)!r} does not exist")
    spec = importlib.util.spec_from_file_location(resolved.stem, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[resolved.stem] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[resolved.stem]
        raise ConfigError(f"imports: {str(path)!r} failed to import: {_where(err)}") from None
    return module


def _where(err: Exception) -> str:
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    place = f" ({tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})" if tb is not None else ""
    return f"{type(err).__name__}: {err}{place}"


@functools.cache
def load_entry_points() -> tuple[str, ...]:
    """Import every installed package's `rlax_trpo.plugins` entry point (once per process);
    returns their names."""
    names = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except Exception as err:
            raise ConfigError(
                f"plugin entry point {entry.name!r} ({entry.value}) failed to load: {_where(err)}"
            ) from None
        names.append(entry.name)
    return tuple(names)
