"""Populations of seeds x hyperparameter settings.

A sweep is a grid over the hyperparameters of the run's algorithm (`--sweep
hp.learning_rate=1e-4,3e-4`, any `HParams` field of its `hp:` section, for control and
language-model runs alike). Every grid point ("setting") runs with the same seeds, and the
whole grid is one population axis of size `settings x seeds`, laid out setting-major: member
`m` is setting `m // seeds`, seed `m % seeds`. The population is what `jax.vmap` (and the
device mesh) runs over; nothing here is traced. Statistics over seeds live in
`rlax_trpo.report.stats`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo.config.configuration import Config
from rlax_trpo.config.yamlio import merge_overrides, parse_overrides
from rlax_trpo.errors import ConfigError


class Sweep(NamedTuple):
    """The swept fields (dotted `hp.x` names) and, for each, its values."""

    names: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]

    @property
    def settings(self) -> list[dict[str, float]]:
        """The grid, first swept field outermost: one `{name: value}` dict per setting."""
        return [
            dict(zip(self.names, combo, strict=True)) for combo in itertools.product(*self.values)
        ]

    def to_dict(self) -> dict[str, list[float]]:
        return {n: list(v) for n, v in zip(self.names, self.values, strict=True)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence[float]]) -> Sweep:
        return cls(tuple(data), tuple(tuple(float(x) for x in v) for v in data.values()))


NO_SWEEP = Sweep((), ())


MAX_SETTINGS = 10_000  # the largest grid (settings: the product of the value counts)


def parse_sweeps(items: Sequence[str], config: Config, overrides: Sequence[str] = ()) -> Sweep:
    """Parse `--sweep hp.name=v1,v2,...` arguments into a `Sweep` of `config`'s algorithm.

    Only `hp.*` fields (traced floats) can be swept in one compiled call; a static field
    (one that fixes a shape or a loop length) is refused with a one-line `ConfigError`, as is
    a hyperparameter the algorithm does not read, a key also set by one of the command
    line's `overrides` (`key=value`: config.yaml would record a value no member used), and a
    grid of more than `MAX_SETTINGS` settings (checked before any value is). Each value is
    validated as the hyperparameter it sets.
    """
    hp_names = type(config.hp).names()
    allowed = ", ".join("hp." + k for k in hp_names)
    given = merge_overrides({}, parse_overrides(list(overrides))).get("hp")
    given = given if isinstance(given, dict) else {}  # hyperparameters the overrides set
    grid: dict[str, list[float]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(
                f"--sweep {item!r}: expected hp.name=v1,v2,... (e.g. hp.learning_rate=1e-4,3e-4)"
            )
        field = key.removeprefix("hp.")
        if not key.startswith("hp.") and field in config.to_dict():
            raise ConfigError(
                f"--sweep {key}: is a static field (it fixes a shape or a loop length, so "
                f"every value needs its own compile); only hp.* fields can be swept in one "
                f"call: {allowed}"
            )
        if not key.startswith("hp.") or field not in hp_names:
            raise ConfigError(
                f"--sweep {key}: not a hyperparameter of {config.algorithm}; allowed: {allowed}"
            )
        if key in grid:
            raise ConfigError(f"--sweep {key}: given twice; list all its values once")
        if field in given:
            raise ConfigError(
                f"--sweep {key}: also set by the override {key}={given[field]}; "
                f"give its values in --sweep only (or drop the sweep)"
            )
        grid[key] = _numbers(key, text)
    sweep = Sweep(tuple(grid), tuple(tuple(v) for v in grid.values()))
    check_grid(sweep)
    for key, values in grid.items():  # validate each value against the field's bounds
        for v in values:
            config.replace(**{key: v})
    return sweep


def check_grid(sweep: Sweep) -> None:
    """A grid of at most `MAX_SETTINGS` settings; a one-line ConfigError otherwise (counted
    without building it: every setting is a member of one compiled population)."""
    settings = math.prod(len(v) for v in sweep.values)
    if settings > MAX_SETTINGS:
        counts = " x ".join(
            f"{len(v)} ({n})" for n, v in zip(sweep.names, sweep.values, strict=True)
        )
        raise ConfigError(
            f"--sweep: {counts} = {settings} settings; at most {MAX_SETTINGS:,} in one run "
            "(every setting runs with every seed in one compiled call): split the grid "
            "over several runs"
        )


def _numbers(key: str, text: str) -> list[float]:
    parsed = []
    for word in text.split(","):
        try:
            parsed.append(float(word))
        except ValueError:
            raise ConfigError(
                f"--sweep {key}: value {word.strip()!r} is not a number (expected {key}=v1,v2,...)"
            ) from None
    if len(set(parsed)) != len(parsed):
        raise ConfigError(f"--sweep {key}: repeated value in {text!r}")
    return parsed


def population_hparams(
    base: Any, sweep: Sweep, num_seeds: int, names: Sequence[str] | None = None
) -> Any:
    """`base` (a dataclass or NamedTuple of float scalars, e.g. `HParams`) with every leaf
    float32 `[settings x seeds]`, setting-major; swept fields take their setting's value.
    `names`: the fields of `base` (`Program.hparam_names`; default: its own fields)."""
    settings = sweep.settings or [{}]
    if names is None:
        names = getattr(base, "_fields", None) or [f.name for f in dataclasses.fields(base)]
    columns = {}
    for field in names:
        per_setting = [s.get("hp." + field, float(getattr(base, field))) for s in settings]
        columns[field] = np.repeat(np.asarray(per_setting, np.float32), num_seeds)
    return type(base)(**columns)


def population_key_data(seed: int, num_seeds: int, num_settings: int) -> np.ndarray:
    """Raw key data `[settings x seeds, ...]`: every setting uses the same seeds' keys.

    With one setting this is `jax.random.split(jax.random.key(seed), num_seeds)`, so a run
    without a sweep draws the same keys as before sweeps existed.
    """
    keys = jax.random.key_data(jax.random.split(jax.random.key(seed), num_seeds))
    return np.tile(np.asarray(keys), (num_settings,) + (1,) * (keys.ndim - 1))


def setting_label(values: Mapping[str, float]) -> str:
    """Short label for plots and log folders: `learning_rate=0.001,clip_eps=0.1`."""
    if not values:
        return "default"
    return ",".join(f"{k.removeprefix('hp.')}={v:g}" for k, v in values.items())
