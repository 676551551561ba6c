"""A run's plan and the records its stages pass on: `RunPlan` (the inputs, checked by
`plan_run` before anything is written or started), `Placement` (the population on the
devices), `Folder` (the run folder) and `Setup` (what the first stages decided, for the
later ones). Every stage module of `rlax_trpo.experiment` imports its records from here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo.config import sweep as sweeplib
from rlax_trpo.config.checks import INT32_MAX
from rlax_trpo.errors import ConfigError, arg, arg_value
from rlax_trpo.experiment import loggers
from rlax_trpo.experiment.lock import RunLock
from rlax_trpo.experiment.record import RunRecord
from rlax_trpo.experiment.resume import plan_resume as resume_plan
from rlax_trpo.report import run_files
from rlax_trpo.types import Program

# A run's keys are drawn from its seed and (the evaluation's) seed + 1; JAX keeps a seed's
# low 32 bits (64-bit integers are off), so a larger one would repeat a smaller one's run.
MAX_SEED = 2**32 - 2


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
    single_call: bool = False  # each chunk one compiled `lax.scan` (benchmarks' fast path)
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

    def record(self, **step: Any) -> RunRecord:
        """What the run folder keeps of this plan (plan.json; meta.json with a step's facts,
        `step`, given)."""
        return RunRecord(
            self.config.to_dict(),
            self.seeds,
            self.seed,
            self.sweep,
            self.total,
            self.chunk,
            self.population,
            **step,
        )


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
    shared: Any = None  # `Program.shared` on the devices (one copy for the population)


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
    check_arguments(given)
    plan = given
    if given.resume is not None:
        resume = Path(given.resume)
        if given.out is not None:
            raise ConfigError(
                f"{arg('out')}: a resumed run continues in its own folder; drop {arg('out')}"
            )
        holder = RunLock.holder(resume)
        if holder is not None:
            raise ConfigError(
                f"{arg('resume')}: {str(resume)!r} is being written by another run ({holder})"
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
        raise ConfigError(f"run: a config is needed (or {arg_value('resume', '<run folder>')})")
    out = Path(plan.out) if plan.out is not None else None
    if given.resume is None and out is not None:
        check_new_folder(out)
    loggers.check_available(plan.tensorboard, plan.wandb)
    plan = plan._replace(
        out=out, seeds=plan.seeds or 1, seed=plan.seed or 0, sweep=plan.sweep or sweeplib.NO_SWEEP
    )
    check_population(plan)
    return plan


def check_arguments(given: RunPlan) -> None:
    """The arguments of `run` that are checked on their own (one-line ConfigError)."""
    for flag, value in (
        ("seeds", given.seeds),
        ("chunk_iterations", given.chunk_iterations),
        ("log_every", given.log_every),
        ("keep_checkpoints", given.keep_checkpoints),
    ):
        if value is not None and value < 1:
            raise ConfigError(f"{arg(flag)}: must be a positive integer (got {value})")
    if given.seed is not None and not 0 <= given.seed <= MAX_SEED:
        raise ConfigError(
            f"{arg('seed')}: must be an integer from 0 to {MAX_SEED} (got {given.seed})"
        )
    for flag, path in (("out", given.out), ("resume", given.resume)):
        if path is not None and not str(path).strip():
            raise ConfigError(
                f"{arg(flag)}: an empty path (it would be the current directory); give a folder"
            )
    if given.sweep is not None:
        sweeplib.check_grid(given.sweep)
    if given.single_call and given.chunk_iterations is not None:
        raise ConfigError(
            f"{arg('single_call')}: the whole run is one compiled call; drop "
            f"{arg('chunk_iterations')} (or {arg('single_call')})"
        )


def check_population(plan: RunPlan) -> None:
    """A population JAX can index (int32), and with `pbt:` one of two members or more."""
    if plan.population > INT32_MAX:
        raise ConfigError(
            f"{arg('seeds')}: {len(plan.settings)} setting(s) x {plan.seeds} seed(s) = "
            f"{plan.population} members; JAX indexes the population in int32 (at most "
            f"{INT32_MAX})"
        )
    pbt = plan.config.to_dict().get("pbt") or {}
    drawn = [n for n in plan.sweep.names if n.removeprefix("hp.") in (pbt.get("explore") or {})]
    if drawn and pbt.get("init") == "prior":  # every member draws it: the sweep sets nothing
        raise ConfigError(
            f"{arg('sweep')} {drawn[0]}: with pbt.init: prior each member starts from a draw of "
            f"pbt.explore.{drawn[0].removeprefix('hp.')}'s prior, so the sweep would set no "
            "member; drop the sweep, or set pbt.init=config to start the members from its values"
        )
    if pbt and plan.population < 2:
        raise ConfigError(
            f"pbt: a population of 1 member has no other to copy; use {arg('seeds')} N (N >= 2) "
            f"or {arg('sweep')}"
        )


def check_new_folder(out: Path) -> None:
    """A fresh run's `--out`: absent or an empty directory; else one line saying what it is
    and what to do instead."""
    if not out.exists():
        return
    flag = arg("out")
    if not out.is_dir():
        raise ConfigError(f"{flag}: {str(out)!r} exists and is not a directory")
    if not any(out.iterdir()):
        return
    holder = RunLock.holder(out)
    if holder is not None:
        raise ConfigError(f"{flag}: {str(out)!r} is being written by another run ({holder})")
    if (out / "checkpoint").is_dir() and not run_files.finished(out):
        what = f"a run that did not finish; continue it with {arg_value('resume', out)}, or"
    elif (out / "summary.json").is_file() or (out / "config.yaml").is_file():
        what = f"a finished run (`rlax-trpo eval --run {out}` evaluates it);"
    else:
        raise ConfigError(f"{flag}: {str(out)!r} exists and is not empty; give a new folder")
    raise ConfigError(f"{flag}: {str(out)!r} holds {what} choose another folder")


def unplaced(tree: Any) -> Any:
    """Shapes and dtypes of `tree`'s arrays without their placement: what the run's `init` is
    traced with (once, cached by jax) for the memory check, the placement and compilation."""
    dtype = lambda x: x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), dtype(x)), tree)
