"""A run: the population of seeds x settings, devices, compilation, chunks and checkpoints,
signals, evaluation and the run folder. `train.py` and notebooks call `run`.

    from rlax_trpo import Config, experiment
    result = experiment.run(Config.create(env="Acrobot-v1"), seeds=4, out="runs/acrobot")
    result.summary["final_return_mean"], result.metrics["episode/return"]  # [4, iterations]

Every member of the population (member m = setting m // seeds, seed m % seeds) runs inside
one compiled, vmapped call, sharded over the devices. The driver applies `jax.jit` to the
pure functions of a `Program` (`rlax_trpo.program`), which answers all that differs between
a control run and a language-model run. `run` is a sequence of named stages, each passing a
named record to the next:

    plan_run       the checked inputs (`RunPlan`); nothing written, nothing started
    build          the config's `Program`, the swept names checked against it
    place          the population on the devices (`Placement`)
    make_folder    the run folder and where it is written (`run_folder.Folder`)
    restore        iteration 0, or the last checkpoint (`chunks.Start`)
    open_folder    config.yaml and the live loggers (`run_folder`)
    compile_run    the initialiser and one program per chunk length (`chunks.Compiled`)
    train          the chunks: metrics, loggers, checkpoints, signals, divergence
                   (`chunks.Trained`)
    evaluate       the final evaluation, the state on the host (`run_folder.Evaluated`)
    summarize      summary.json's figures (`run_folder`)
    finish_folder  metrics.csv, plots, summary.json, the folder in its place (`run_folder`)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo import loggers, parallel
from rlax_trpo import sweep as sweeplib
from rlax_trpo.chunks import compile_run, population_initializer, restore, train
from rlax_trpo.errors import ConfigError, describe_failure
from rlax_trpo.platform import setup_cpu_for_run
from rlax_trpo.program import make_program
from rlax_trpo.progress import ProgressBar, StopRequest
from rlax_trpo.resume import plan_resume as resume_plan
from rlax_trpo.run_folder import (
    Folder,
    RunLock,
    close_writers,
    describe_kept,
    evaluate,
    finish_folder,
    holds_results,
    make_folder,
    open_folder,
    release_folder,
    summarize,
)
from rlax_trpo.types import Program


class RunResult(NamedTuple):
    """What `run` returns. `status`: "complete", "diverged" or "interrupted" (by a signal,
    after a checkpoint; `signal` names it). Arrays are host numpy, population first."""

    out: Path
    status: str
    summary: dict[str, Any] | None
    metrics: dict[str, np.ndarray]
    state: Any
    signal: int | None = None


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


class Setup(NamedTuple):
    """What the first stages decided, for the later ones."""

    plan: RunPlan
    program: Program
    placement: Placement
    folder: Folder


def run(
    config: Any = None,
    *,
    seeds: int | None = None,
    seed: int | None = None,
    sweep: sweeplib.Sweep | None = None,
    out: str | Path | None = None,
    chunk_iterations: int | None = None,
    resume: str | Path | None = None,
    devices: int | None = None,
    shard: str = "population",
    progress: bool = True,
    tensorboard: bool = False,
    wandb: dict[str, Any] | None = None,
    log_every: int | None = None,
    keep_checkpoints: int = 2,
    hard_stop: bool = False,
) -> RunResult:
    """Train a population and write its run folder; every input is checked before any write.

    Args:
      config: a `Config`, or a language-model config (`rlax_trpo.lm.config`); optional with
        `resume`, where it must match the saved one.
      seeds, seed: seeds per setting (default 1) and the base PRNG seed (default 0).
      sweep: hyperparameter settings (`sweep.parse_sweeps`); each runs with every seed.
      out: the run folder (default `runs/<algorithm>_<env>_<time>`); must not hold files.
      chunk_iterations: run in compiled chunks of this many iterations with a checkpoint
        after each. SIGINT/SIGTERM stop a run cleanly after the current chunk (without
        chunks: after its one compiled call) and its checkpoint.
      resume: a run folder to continue from its last checkpoint.
      devices, shard: how many devices, and whether the population or each run's
        environments are split over them (`parallel`). If JAX has not started, the CPU
        gets one device per core first, as under `rlax-trpo train`.
      progress: a tqdm progress bar.
      tensorboard, wandb, log_every: TensorBoard event files; Weights & Biases runs
        (`{"project": ..., "name": ...}`); written every `log_every` iterations
        (`rlax_trpo.loggers`).
      keep_checkpoints: how many of the newest checkpoints a run keeps (default 2): resume
        falls back to the previous one when the newest is damaged.
      hard_stop: a second SIGINT/SIGTERM ends the process at once with one line saying what
        was kept, exit status 128 + signal (as `rlax-trpo train` does); by default a
        second Ctrl-C raises KeyboardInterrupt instead (notebooks).

    Raises:
      ConfigError: bad input (one line naming it); nothing has been written then.
    """
    given = RunPlan(config=config, seeds=seeds, seed=seed, sweep=sweep, out=out,
                    chunk_iterations=chunk_iterations, resume=resume, devices=devices,
                    shard=shard, progress=progress, tensorboard=tensorboard, wandb=wandb,
                    log_every=log_every, keep_checkpoints=keep_checkpoints)  # fmt: skip
    plan = plan_run(given)
    note = setup_cpu_for_run(devices)
    if note:
        print(note, file=sys.stderr, flush=True)
    # SIGINT/SIGTERM are taken from the start (compilation included).
    with StopRequest(hard=hard_stop, single_call=not plan.chunked) as stop:
        return _drive(plan, stop)


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
        _check_new_folder(out)
    loggers.check_available(plan.tensorboard, plan.wandb)
    return plan._replace(
        out=out, seeds=plan.seeds or 1, seed=plan.seed or 0, sweep=plan.sweep or sweeplib.NO_SWEEP
    )


def _check_new_folder(out: Path) -> None:
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


def _drive(plan: RunPlan, stop: StopRequest) -> RunResult:
    """The stages after the plan, in order. On any failure the folder is released: kept
    when it holds a checkpoint, else what this run wrote is removed; the failure becomes
    one line (`RunFailed`) saying what was kept."""
    owner = jax.process_index() == 0
    bar = ProgressBar(0, 0, plan.progress and owner, plan.population)
    program = build(plan, bar)
    plan = plan._replace(num_iterations=program.num_iterations)
    placement = place(plan, program)
    setup = Setup(plan, program, placement, folder=make_folder(plan, program, owner))
    stop.kept = lambda: describe_kept(setup.folder)
    try:
        return _stages(setup, bar, stop)
    except BaseException as err:
        keep = plan.resume is not None or holds_results(setup.folder)
        release_folder(setup.folder, keep=keep)
        failure = describe_failure(err, setup.folder.out if keep else None)
        if failure is None:
            raise
        raise failure from None
    finally:
        bar.close()


def _stages(setup: Setup, bar: ProgressBar, stop: StopRequest) -> RunResult:
    """restore, open_folder, compile_run, train, evaluate, summarize, finish_folder."""
    start = restore(setup, bar)
    writers: list[Any] = []
    try:
        writers = open_folder(setup)
        compiled = compile_run(setup, start)
        trained = train(setup, compiled, start, writers, stop)
        bar.close()
        if trained.signal is not None:
            release_folder(setup.folder, keep=True)
            out = setup.folder.out
            return RunResult(out, "interrupted", None, trained.metrics, None, trained.signal)
        evaluated = evaluate(setup, compiled, trained)
        summary = summarize(setup, compiled, trained, evaluated)
        finish_folder(setup, writers, trained.metrics, summary)
    finally:
        bar.close()
        close_writers(writers)
    release_folder(setup.folder, keep=True)
    status = "diverged" if "diverged" in summary else "complete"
    return RunResult(setup.folder.out, status, summary, trained.metrics, evaluated.state)


def build(plan: RunPlan, bar: ProgressBar) -> Program:
    """The config's `Program` (ConfigError for bad names and sizes), the swept names checked
    against its hyperparameters."""
    program = make_program(plan.config, progress=bar)
    bar.steps_per_iteration = program.steps_per_iteration
    bar.total = program.num_iterations
    for name in plan.sweep.names:
        if name.removeprefix("hp.") not in program.hparam_names:
            raise ConfigError(f"--sweep {name}: not a hyperparameter of {plan.config.algorithm}")
    return program


def place(plan: RunPlan, program: Program) -> Placement:
    """The device mesh, the population's inputs on it, and the shardings of its state."""
    num_devices = parallel.choose_num_devices(
        plan.devices, plan.population, program.num_envs, plan.shard
    )
    mesh = parallel.make_mesh(num_devices, plan.shard)
    population = parallel.population_sharding(mesh)
    hparams = sweeplib.population_hparams(
        program.hparams, plan.sweep, plan.seeds, program.hparam_names
    )
    hparams = parallel.put(hparams, population)
    settings = len(plan.settings)
    init_keys = sweeplib.population_key_data(plan.seed, plan.seeds, settings)
    init_keys = parallel.put(init_keys, population)
    abstract = jax.eval_shape(population_initializer(program), init_keys, hparams)
    shardings = parallel.state_shardings(abstract, mesh)
    placed = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    eval_keys = sweeplib.population_key_data(plan.seed + 1, plan.seeds, settings)
    return Placement(
        num_devices=num_devices,
        population=population,
        state=shardings,
        abstract=abstract,
        placed=placed,
        hparams=hparams,
        init_keys=init_keys,
        eval_keys=parallel.put(eval_keys, population),
    )
