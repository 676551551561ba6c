"""Optional live loggers, written between compiled chunks: TensorBoard event files and
Weights & Biases runs.

Both log, per sweep setting, the mean over that setting's seeds of every metric that
`metrics.csv` has, at every iteration. They write after each chunk of the run: every
`log_every` iterations (`default_log_every`, about a tenth of the run, unless
`chunk_iterations` or `--log-every` say otherwise). Chunking does not change the result
(running `run` for k then n - k iterations equals running it for n).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlax_trpo.errors import ConfigError


def check_available(tensorboard: bool, wandb: Mapping[str, Any] | None) -> None:
    """A one-line ConfigError, before anything is written, for a logger not installed or,
    for W&B online, no credentials (`WANDB_MODE=offline` and `disabled` need none)."""
    for wanted, module, flag, extra in (
        (tensorboard, "tensorboardX", "--tensorboard", "tensorboard"),
        (wandb is not None, "wandb", "--wandb", "wandb"),
    ):
        if wanted:
            try:
                __import__(module)
            except ImportError:
                raise ConfigError(
                    f"{flag}: needs {module} (pip install 'rlax_trpo[{extra}]')"
                ) from None
    if wandb is not None and not _wandb_can_log():
        raise ConfigError(
            "--wandb: no W&B credentials (no WANDB_API_KEY, no entry in ~/.netrc); run "
            "`wandb login`, or set WANDB_MODE=offline to write the runs locally"
        )


_WANDB_LOCAL_MODES = ("offline", "disabled", "dryrun")


def _wandb_can_log() -> bool:
    """Whether `wandb.init` will find what it needs without prompting: a local mode, or
    credentials where wandb looks for them (environment, .netrc, its settings files).
    Asks wandb itself, without a network; True where this wandb version cannot be asked."""
    import os

    if os.environ.get("WANDB_MODE", "").lower() in _WANDB_LOCAL_MODES:
        return True
    try:
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib.wbauth import authenticate_session
    except ImportError:  # a wandb without this lookup: wandb.init decides
        return True
    settings = wandb_setup.singleton().settings
    if str(settings.mode).lower() in _WANDB_LOCAL_MODES:  # e.g. after `wandb offline`
        return True
    found = authenticate_session(
        host=settings.base_url, source="rlax-trpo", prompt=False, update_session=False
    )
    return found is not None


def default_log_every(total: int) -> int:
    """About a tenth of the run: the divisor of `total` nearest total / 10 between a fifth
    and a twentieth of it (equal chunks), else ceil(total / 10)."""
    target = total / 10
    divisors = [d for d in range(max(1, total // 20), max(1, total // 5) + 1) if total % d == 0]
    if divisors:
        return min(divisors, key=lambda d: abs(d - target))
    return max(1, math.ceil(target))


def setting_means(metrics: Mapping[str, np.ndarray], settings: int) -> dict[str, np.ndarray]:
    """Every metric `[settings x seeds, iterations]` -> `[settings, iterations]`, the mean
    over seeds of the finite values (NaN where a setting has none, e.g. no episode ended)."""
    out = {}
    for name, values in metrics.items():
        per = np.asarray(values, dtype=np.float64).reshape(settings, -1, values.shape[-1])
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out[name] = np.nanmean(per, axis=1)
    return out


class TensorBoardWriter:
    """TensorBoard event files beside the CSV (needs `tensorboardX`): one log folder per
    sweep setting (`<run>/tensorboard/<setting>`), each scalar at the env step (per seed)
    of its iteration."""

    def __init__(self, logdir: Path, labels: Sequence[str]):
        from tensorboardX import SummaryWriter

        self.writers = [SummaryWriter(str(Path(logdir) / _safe(label))) for label in labels]

    def write(
        self, metrics: Mapping[str, np.ndarray], first_iteration: int, steps_per_iteration: int
    ) -> None:
        """Log iterations `first_iteration ...` of metrics `[settings x seeds, iters]`."""
        for name, means in setting_means(metrics, len(self.writers)).items():
            for writer, row in zip(self.writers, means, strict=True):
                for i, v in enumerate(row):
                    if math.isfinite(v):
                        step = (first_iteration + i + 1) * steps_per_iteration
                        writer.add_scalar(name, float(v), step)
        for writer in self.writers:
            writer.flush()

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class WandbWriter:
    """Weights & Biases runs (needs `wandb`): one per sweep setting, all in the group named
    after the run folder. Each run's config is the resolved configuration with the
    setting's values, plus `seeds`, `seed` and `setting`; each iteration is logged at W&B
    step = metrics.csv's `iteration`, with `env_steps` (per seed, at its end). `WANDB_MODE=offline`
    writes to `<run>/wandb/` without a network. A resumed run starts new W&B runs."""

    def __init__(
        self,
        run_dir: Path,
        labels: Sequence[str],
        configs: Sequence[Mapping[str, Any]],
        project: str,
        name: str,
        group: str,
    ):
        import wandb

        self.runs = []
        for label, config in zip(labels, configs, strict=True):
            self.runs.append(
                wandb.init(
                    project=project,
                    name=f"{name}[{label}]" if len(labels) > 1 else name,
                    group=group,
                    config=dict(config),
                    dir=str(run_dir),
                    reinit="create_new",
                )
            )

    def write(
        self, metrics: Mapping[str, np.ndarray], first_iteration: int, steps_per_iteration: int
    ) -> None:
        means = setting_means(metrics, len(self.runs))
        iterations = next(iter(means.values())).shape[-1]
        for s, run in enumerate(self.runs):
            for i in range(iterations):
                it = first_iteration + i  # metrics.csv's `iteration`
                row = {k: float(v[s, i]) for k, v in means.items() if math.isfinite(v[s, i])}
                run.log({**row, "env_steps": (it + 1) * steps_per_iteration}, step=it)

    def close(self) -> None:
        for run in self.runs:
            run.finish()


def setting_configs(
    config: Mapping[str, Any], settings: Sequence[Mapping[str, Any]], seeds: int, seed: int
) -> list[dict[str, Any]]:
    """The resolved configuration of every sweep setting (`hp.NAME` values applied)."""
    out = []
    for values in settings:
        resolved = {**config, "hp": dict(config.get("hp", {}))}
        for key, value in values.items():
            resolved["hp"][key.removeprefix("hp.")] = value
        out.append({**resolved, "seeds": seeds, "seed": seed, "setting": dict(values)})
    return out


def open_writers(
    work: Path,
    group: str,
    config: Mapping[str, Any],
    settings: Sequence[Mapping[str, Any]],
    seeds: int,
    seed: int,
    tensorboard: bool,
    wandb: Mapping[str, Any] | None,
) -> list[Any]:
    """The writers a run asks for: TensorBoard under `work/tensorboard`, W&B runs in the
    group `group` (the run folder's name, also the default run name)."""
    from rlax_trpo.config.sweep import setting_label

    labels = [setting_label(s) for s in settings]
    writers: list[Any] = []
    if tensorboard:
        writers.append(TensorBoardWriter(work / "tensorboard", labels))
    if wandb is not None:
        configs = setting_configs(config, settings, seeds, seed)
        name = wandb.get("name") or group
        project = wandb.get("project") or "rlax_trpo"
        writers.append(WandbWriter(work, labels, configs, project, name, group))
    return writers


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "=.,-_" else "_" for c in label)
