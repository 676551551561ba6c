"""Populations of seeds x hyperparameter settings, and robust statistics over seeds.

A sweep is a grid over `HParams` fields (`--sweep hp.learning_rate=1e-4,3e-4`). Every grid
point ("setting") runs with the same seeds, and the whole grid is one population axis of
size `settings x seeds`, laid out setting-major: member `m` is setting `m // seeds`, seed
`m % seeds`. The population is what `jax.vmap` (and the device mesh) runs over; nothing here
is traced.

Statistics follow rliable (Agarwal et al. 2021): the interquartile mean (IQM, the mean of the
middle 50% of seeds, `scipy.stats.trim_mean(x, 0.25)`) and percentile-bootstrap 95%
confidence intervals over seeds.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo.config import ConfigModel, HParams, HParamsModel, _validate
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


def parse_sweeps(items: Sequence[str], base_hp: Mapping[str, Any] | None = None) -> Sweep:
    """Parse `--sweep hp.name=v1,v2,...` arguments into a validated `Sweep`.

    Only `hp.*` fields (traced floats) can be swept in one compiled call; a static field
    (one that fixes a shape or a loop length) is refused with a one-line `ConfigError`.
    Each value is validated as the hyperparameter it sets.
    """
    names: list[str] = []
    values: list[tuple[float, ...]] = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(
                f"--sweep {item!r}: expected hp.name=v1,v2,... (e.g. hp.learning_rate=1e-4,3e-4)"
            )
        field = key.removeprefix("hp.")
        if field in ConfigModel.model_fields and not key.startswith("hp."):
            raise ConfigError(
                f"--sweep {key}: is a static field (it fixes a shape or a loop length, so "
                f"every value needs its own compile); only hp.* fields can be swept in one "
                f"call: {', '.join('hp.' + k for k in sorted(HParamsModel.model_fields))}"
            )
        if not key.startswith("hp.") or field not in HParamsModel.model_fields:
            raise ConfigError(
                f"--sweep {key}: unknown hyperparameter; allowed: "
                f"{', '.join('hp.' + k for k in sorted(HParamsModel.model_fields))}"
            )
        if key in names:
            raise ConfigError(f"--sweep {key}: given twice; list all its values once")
        parsed = []
        for word in text.split(","):
            try:
                parsed.append(float(word))
            except ValueError:
                raise ConfigError(
                    f"--sweep {key}: value {word.strip()!r} is not a number "
                    f"(expected {key}=v1,v2,...)"
                ) from None
        if len(set(parsed)) != len(parsed):
            raise ConfigError(f"--sweep {key}: repeated value in {text!r}")
        for v in parsed:  # validate each value against the field's bounds
            _validate(HParamsModel, {**(base_hp or {}), field: v}, prefix="hp.")
        names.append(key)
        values.append(tuple(parsed))
    return Sweep(tuple(names), tuple(values))


def population_hparams(base: HParams, sweep: Sweep, num_seeds: int) -> HParams:
    """HParams whose leaves are float32 `[settings x seeds]`, setting-major."""
    settings = sweep.settings or [{}]
    columns = {}
    for field in HParamsModel.model_fields:
        per_setting = [s.get("hp." + field, float(getattr(base, field))) for s in settings]
        columns[field] = np.repeat(np.asarray(per_setting, np.float32), num_seeds)
    return HParams(**columns)


def population_key_data(seed: int, num_seeds: int, num_settings: int) -> np.ndarray:
    """Raw key data `[settings x seeds, ...]`: every setting uses the same seeds' keys.

    With one setting this is `jax.random.split(jax.random.key(seed), num_seeds)`, so a run
    without a sweep draws the same keys as before sweeps existed.
    """
    keys = jax.random.key_data(jax.random.split(jax.random.key(seed), num_seeds))
    return np.tile(np.asarray(keys), (num_settings,) + (1,) * (keys.ndim - 1))


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: drop `floor(n/4)` lowest and highest values, average the rest."""
    x = np.sort(np.asarray(x, np.float64), axis=axis)
    n = x.shape[axis]
    cut = int(0.25 * n)
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def bootstrap_ci(
    x: np.ndarray,
    statistic=np.mean,
    num_resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of `statistic` over the values `x` (seeds).

    Resamples seeds with replacement; with one value the interval is that value.
    """
    x = np.asarray(x, np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(num_resamples, len(x)))
    stats = statistic(x[idx], axis=-1)
    lo, hi = np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def member_summaries(
    finals: np.ndarray,
    sweep: Sweep,
    num_seeds: int,
    eval_returns: np.ndarray | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """One summary per setting from per-member final returns `[settings x seeds]`.

    Each has the setting's values, `final_return_mean`/`_std`, `final_return_iqm`, and 95%
    bootstrap intervals of the mean and of the IQM over the seeds with a finished episode.
    Returns the list and the index of the best setting (highest IQM; None if no setting
    finished an episode).
    """
    settings = sweep.settings or [{}]
    per_setting = np.asarray(finals, np.float64).reshape(len(settings), num_seeds)
    members, best, best_key = [], None, None
    for i, (values, f) in enumerate(zip(settings, per_setting, strict=True)):
        ok = f[np.isfinite(f)]
        entry: dict[str, Any] = {"index": i, "hp": values, "final_return_per_seed": f}
        if ok.size:
            entry.update(
                {
                    "final_return_mean": float(ok.mean()),
                    "final_return_std": float(ok.std()),
                    "final_return_iqm": float(iqm(ok)),
                    "final_return_mean_ci95": list(bootstrap_ci(ok, np.mean)),
                    "final_return_iqm_ci95": list(bootstrap_ci(ok, iqm)),
                    "seeds_with_episodes": int(ok.size),
                }
            )
            key = (entry["final_return_iqm"], entry["final_return_mean"])
            if best_key is None or key > best_key:
                best, best_key = i, key
        else:
            entry.update(
                {
                    "final_return_mean": None,
                    "final_return_std": None,
                    "final_return_iqm": None,
                    "final_return_mean_ci95": None,
                    "final_return_iqm_ci95": None,
                    "seeds_with_episodes": 0,
                }
            )
        if eval_returns is not None:
            e = np.asarray(eval_returns, np.float64).reshape(len(settings), num_seeds, -1)[i]
            entry["eval_return_mean"] = float(e.mean())
        members.append(entry)
    return members, best


def setting_label(values: Mapping[str, float]) -> str:
    """Short label for plots and log folders: `learning_rate=0.001,clip_eps=0.1`."""
    if not values:
        return "default"
    return ",".join(f"{k.removeprefix('hp.')}={v:g}" for k, v in values.items())
