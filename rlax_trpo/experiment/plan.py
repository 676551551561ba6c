"""A run's plan and the records its stages pass on: `RunPlan` (the inputs, checked by
`plan_run` before anything is written or started), `Placement` (the population on the
devices), `Folder` (the run folder) and `Setup` (what the first stages decided, for the
later ones). Every stage module of `rlax_trpo.experiment` imports its records from here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

from rlax_trpo.config import sweep as sweeplib
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment import loggers
from rlax_trpo.experiment.lock import RunLock
from rlax_trpo.experiment.resume import plan_resume as resume_plan
from rlax_trpo.types import Program


class RunPlan(NamedTuple):
    """A run's inputs, as `run` got them and, after `plan_run`, checked (a resumed run's
    read from its checkpoint); nothing has been written or started."""

    config: Any
    seeds: int  # None as given: 1
    seed: int  # None as given: 0
    sweep: sweeplib.Sweep  # None as given: no sweep
    out: Path | None  # None: runs/<algorithm>_<Program.run_name>_<time>
    chunk_iterations: int | None
    resume: Path | None  # the run folder continued, also `out`
    devices: int | None
    shard: str
    progress: bool
    tensorboard: bool
    wandb: dict[str, Any] | None
    log_every: int | None
    keep_checkpoints: int = 2
    start_over: bool = False  # a resumed run that had saved no checkpoint: from iteration 0
    num_iterations: int | None = None  # the Program's (`build`)

    @property
    def settings(self) -> list[dict[str, float]]:
        return self.sweep.settings or [{}]

    @property
    def population(self) -> int:  # settings x seeds
        return len(self.settings) * self.seeds

    @property
    def chunked(self) -> bool:
        return self.chunk_iterations is not None

    @property
    def total(self) -> int:  # iterations, known once the Program is built
        return self.num_iterations

    @property
    def chunk(self) -> int:  # iterations between checkpoints (the whole run when unchunked)
        return min(self.chunk_iterations or self.total, self.total)


class Placement(NamedTuple):
    """The population on the devices: its inputs, sharded, and where its state lives."""

    num_devices: int
    population: Any  # the sharding of arrays with a leading population axis
    state: Any  # the shardings of the state
    abstract: Any  # the state's shapes and dtypes
    placed: Any  # the same with their shardings (what the chunks are compiled for)
    hparams: Any  # [population] hyperparameters
    init_keys: Any  # [population] key data of the initialisation
    eval_keys: Any  # [population] key data of the evaluations


class Folder(NamedTuple):
    """The run folder, written in place. `owner`: this process writes it (process 0 speaks
    for all); `created`: this run created it (else it was an empty folder, or a resumed run's)."""

    out: Path
    owner: bool
    created: bool = False
    lock: RunLock | None = None


class Setup(NamedTuple):
    """What the first stages decided, for the later ones."""

    plan: RunPlan
    program: Program
    placement: Placement
    folder: Folder


def plan_run(given: RunPlan) -> RunPlan:
    """`run`'s arguments checked (one-line ConfigError) and completed: defaults, and a
    resumed run's from its checkpoint. Nothing is written."""
    for flag, value in (
        ("--seeds", given.seeds),
        ("--chunk-iterations", given.chunk_iterations),
        ("--log-every", given.log_every),
        ("--keep-checkpoints", given.keep_checkpoints),
    ):
        if value is not None and value < 1:
            raise ConfigError(f"{flag}: must be a positive integer (got {value})")
    if given.seed is not None and not 0 <= given.seed < 2**63:
        raise ConfigError(f"--seed: must be an integer from 0 to 2**63 - 1 (got {given.seed})")
    plan = given
    if given.resume is not None:
        resume = Path(given.resume)
        if given.out is not None:
            raise ConfigError("--out: a resumed run continues in its own folder; drop --out")
        holder = RunLock.holder(resume)
        if holder is not None:
            raise ConfigError(
                f"--resume: {str(resume)!r} is being written by another run ({holder})"
            )
        saved = resume_plan(resume, given.config, given.seeds, given.seed, given.sweep)
        chunk = given.chunk_iterations or saved.chunk_iterations
        if saved.note:
            print(saved.note, file=sys.stderr, flush=True)
        plan = given._replace(
            start_over=saved.start_over,
            config=saved.config,
            seeds=saved.seeds,
            seed=saved.seed,
            sweep=saved.sweep,
            chunk_iterations=chunk,
            out=resume,
            resume=resume,
        )
    elif given.config is None:
        raise ConfigError("run: a config is needed (or resume=<run folder>)")
    out = Path(plan.out) if plan.out is not None else None
    if given.resume is None and out is not None:
        check_new_folder(out)
    loggers.check_available(plan.tensorboard, plan.wandb)
    return plan._replace(
        out=out, seeds=plan.seeds or 1, seed=plan.seed or 0, sweep=plan.sweep or sweeplib.NO_SWEEP
    )


def check_new_folder(out: Path) -> None:
    """A fresh run's `--out`: absent or an empty directory; else one line saying what it is."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out: {str(out)!r} exists and is not a directory")
    if not any(out.iterdir()):
        return
    holder = RunLock.holder(out)
    if holder is not None:
        raise ConfigError(f"--out: {str(out)!r} is being written by another run ({holder})")
    if (out / "checkpoint").is_dir() and not (out / "summary.json").exists():
        raise ConfigError(
            f"--out: {str(out)!r} holds a run that did not finish; continue it with "
            f"--resume {out}, or choose another folder"
        )
    raise ConfigError(f"--out: {str(out)!r} exists and is not an empty directory")
