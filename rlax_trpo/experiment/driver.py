"""A run: the population of seeds x settings, devices, compilation, chunks and checkpoints,
signals, evaluation and the run folder. `train.py` and notebooks call `run`.

    from rlax_trpo import Config, experiment
    result = experiment.run(Config.create(env="Acrobot-v1"), seeds=4, out="runs/acrobot")
    result.summary["final_return_mean"], result.metrics["episode/return"]  # [4, iterations]

Every member of the population (member m = setting m // seeds, seed m % seeds) runs inside
one compiled, vmapped call, sharded over the devices. The driver applies `jax.jit` to the
pure functions of a `Program` (`rlax_trpo.experiment.program`), which answers all that
differs between a control run and a language-model run. `run` is a sequence of named
stages, each passing a named record (`rlax_trpo.experiment.plan`) to the next:

    plan_run       the checked inputs (`RunPlan`); nothing written, nothing started
    build          the config's `Program`, the swept names checked against it
    place          the population on the devices (`Placement`)
    make_folder    the run folder and where it is written (`plan.Folder`)
    restore        iteration 0, or the last checkpoint (`chunks.Start`)
    open_folder    config.yaml and the live loggers (`folder`)
    compile_run    the initialiser and one program per chunk length (`chunks.Compiled`)
    train          the chunks: metrics, loggers, checkpoints, signals, divergence
                   (`chunks.Trained`)
    evaluate       the final evaluation, the state on the host (`folder.Evaluated`)
    summarize      summary.json's figures (`folder`)
    finish_folder  metrics.csv, plots, summary.json, the folder in its place (`folder`)
"""

from __future__ import annotations

import contextvars
import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from rlax_trpo.config import sweep as sweeplib
from rlax_trpo.errors import ConfigError, describe_failure
from rlax_trpo.experiment import parallel, runlog
from rlax_trpo.experiment.chunks import compile_run, restore, train
from rlax_trpo.experiment.compile_cache import setup_compile_cache
from rlax_trpo.experiment.folder import (
    close_writers,
    describe_kept,
    evaluate,
    finish_folder,
    finish_unsaved,
    holds_plan,
    make_folder,
    open_folder,
    release_folder,
    stopping_now,
    summarize,
)
from rlax_trpo.experiment.memory_check import check_memory
from rlax_trpo.experiment.plan import (
    Placement,
    RunPlan,
    Setup,
    plan_run,
    unplaced,
)
from rlax_trpo.experiment.population import population_initializer
from rlax_trpo.experiment.program import make_program
from rlax_trpo.experiment.progress import ProgressBar, StopRequest
from rlax_trpo.platform import setup_cpu_for_run
from rlax_trpo.types import Program


class RunResult(NamedTuple):
    """What `run` returns. `status` (also summary.json's): "complete", "diverged" or
    "interrupted" (by a signal, after a checkpoint; `signal` names it; the summary, metrics
    and state are those of the iterations done). Arrays are host numpy, population first."""

    out: Path
    status: str
    summary: dict[str, Any] | None
    metrics: dict[str, np.ndarray]
    state: Any
    signal: int | None = None


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
    single_call: bool = False,
    hard_stop: bool = False,
) -> RunResult:
    """Train a population and write its run folder; every input is checked before any write.

    Args:
      config: a `Config`, or a language-model config (`rlax_trpo.lm.config`); optional with
        `resume`, where it must match the saved one.
      seeds, seed: seeds per setting (default 1) and the base PRNG seed (default 0).
      sweep: hyperparameter settings (`sweep.parse_sweeps`); each runs with every seed.
      out: the run folder (default `runs/<algorithm>_<env>_<time>`); must not hold files.
      chunk_iterations: a checkpoint every this many iterations (default: at the end). A run
        is calls of about 2 s of one compiled program (any budget); SIGINT/SIGTERM stop it
        after the current call, with a checkpoint and its files (`status: interrupted`).
      single_call: each chunk one `lax.scan` and call: fastest, for benchmarks.
      resume: a run folder to continue from its last checkpoint.
      devices, shard: how many devices, and whether the population or each run's
        environments are split over them (`parallel`). If JAX has not started, the CPU
        gets one device per core first, as under `rlax-trpo train`.
      progress: a tqdm progress bar.
      tensorboard, wandb, log_every: TensorBoard event files; Weights & Biases runs
        (`{"project": ..., "name": ...}`); written every `log_every` iterations
        (`rlax_trpo.experiment.loggers`).
      keep_checkpoints: how many of the newest checkpoints a run keeps (default 2): resume
        falls back to the previous one when the newest is damaged.
      hard_stop: a second SIGINT/SIGTERM ends the process at once with one line saying what
        was kept, exit status 128 + signal (as `rlax-trpo train` does); by default a
        second Ctrl-C raises KeyboardInterrupt instead (notebooks).

    Raises:
      ConfigError: bad input (one line naming it); nothing has been written then.
    """
    arguments = dict(locals())  # every argument but hard_stop is a field of the plan
    given = RunPlan(**{k: v for k, v in arguments.items() if k in RunPlan._fields})
    plan = plan_run(given)
    setup_compile_cache()  # unless the command line chose already
    note = setup_cpu_for_run(devices)
    if note:
        print(note, file=sys.stderr, flush=True)
    # SIGINT/SIGTERM are taken from the start (compilation included).
    with StopRequest(hard=hard_stop, single_call=plan.single_call) as stop:
        if jax.process_count() > 1:  # every process stops at the same point, after a chunk:
            stop.begin()  # one stopped at once would leave the others waiting for it
        return _drive(plan, stop)


def _drive(plan: RunPlan, stop: StopRequest) -> RunResult:
    """The stages after the plan, in order. On any failure the folder is released: kept
    when it holds the run's plan or a checkpoint (`--resume` starts it over or continues
    it), else what this run wrote is removed; the failure becomes one line (`RunFailed`)
    saying what was kept."""
    owner = jax.process_index() == 0
    bar = ProgressBar(0, 0, plan.progress and owner, plan.population)
    program = build(plan, bar)
    plan = plan._replace(num_iterations=program.num_iterations)
    check_memory(plan, program)  # before anything is allocated
    placement = place(plan, program)
    stop.begin()  # a signal stopped the run at once so far; now after its checkpoint
    setup = Setup(plan, program, placement, folder=make_folder(plan, program, owner))
    if owner:
        runlog.attach(setup.folder.out)  # the libraries' messages, when the command keeps them
    # On a second signal, on the way out, in the signal watcher's thread: in this context (the
    # command line's option names for the messages), which threads do not inherit.
    context = contextvars.copy_context()
    stop.kept = lambda: context.run(stopping_now, setup.folder)
    try:
        return _stages(setup, bar, stop)
    except BaseException as err:
        keep = plan.resume is not None or holds_plan(setup.folder)
        where = describe_kept(setup.folder) if keep else "nothing was kept"
        release_folder(setup.folder, keep=keep)
        failure = describe_failure(err, where)
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
        # Processes compile at their own pace; Gloo gives a first collective 30 s, fixed.
        parallel.meet("compiled")
        trained = train(setup, compiled, start, writers, stop)
        bar.close()
        # an interrupted run too: its files hold what was computed (`status: interrupted`)
        evaluated = evaluate(setup, compiled, trained)
        summary = summarize(setup, compiled, trained, evaluated)
        if trained.unsaved is not None:  # the results, then one line: the state is lost
            raise finish_unsaved(setup, writers, trained.metrics, summary, trained.unsaved)
        finish_folder(setup, writers, trained.metrics, summary)
    finally:
        bar.close()
        close_writers(writers)
    release_folder(setup.folder, keep=True)
    status = summary["status"]
    return RunResult(
        setup.folder.out, status, summary, trained.metrics, evaluated.state, trained.signal
    )


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
    settings = len(plan.settings)
    init_keys = sweeplib.population_key_data(plan.seed, plan.seeds, settings)
    # Shapes without placement: the trace jax caches for the memory check and the compilation.
    inputs = unplaced((init_keys, hparams, program.shared))
    abstract = jax.eval_shape(population_initializer(program), *inputs)
    hparams = parallel.put(hparams, population)
    init_keys = parallel.put(init_keys, population)
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
        shared=parallel.put_shared(program.shared, mesh),
    )
