"""A run on the host: the population of seeds x settings planned, placed on the devices,
compiled, trained in chunks with checkpoints, evaluated and written to its run folder.

    from rlax_trpo import Config, experiment
    result = experiment.run(Config.create(env="Acrobot-v1"), seeds=4, out="runs/acrobot")

`run` and `RunResult` load on first use (PEP 562), so importing a stage module (the
command line imports `peers` before JAX may start) imports nothing heavy.

    driver      `run`: the stages in order, failures turned into one line
    plan        `RunPlan` (the checked inputs), `Placement`, `Folder`, `Setup`
    program     `make_program`: what a run compiles and drives, for its kind of config
    chunks      compilation, the chunks, their metrics, checkpoints, signals, divergence
    folder      the run folder's stages: making, opening, evaluation, summary, final files
    lock        who may write a run folder
    record      the run's facts in plan.json / meta.json (the versioned folder format)
    checkpoint  orbax steps of the population's state, verified and kept K deep
    resume      what `--resume DIR` continues with
    saved       a finished run read back: `load_policy`, `rlax-trpo eval`
    parallel    devices, meshes and hosts;  peers: multi-process runs when a peer fails
    progress    the progress bar and the signals;  loggers: TensorBoard, Weights & Biases
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"run": "rlax_trpo.experiment.driver", "RunResult": "rlax_trpo.experiment.driver"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlax_trpo.experiment' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
