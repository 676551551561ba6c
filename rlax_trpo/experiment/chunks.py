"""A population compiled and run in chunks: where it starts (fresh or from a checkpoint),
the compiled programs, and the chunks with their metrics, loggers, checkpoints, signals and
divergence. Stages of `rlax_trpo.experiment.run`.

A run compiles one segment program (`population.population_segment`): up to `capacity`
iterations a call, the count and the schedules' horizon inputs of it, so a new budget, a
new `--chunk-iterations` or a resumed run reads it from the compilation cache. Chunks (the
spans between checkpoints, periodic evaluations and log writes) are run as calls of about
`SEGMENT_SECONDS` each, paced by the calls before; a signal stops the run after the call it
came in, with a checkpoint there. `single_call` (benchmarks) compiles one `lax.scan` per
chunk length instead, each chunk one call, and honours a signal only when a call ends.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.experiment import checkpoint, loggers, parallel
from rlax_trpo.experiment.plan import Setup, unplaced
from rlax_trpo.experiment.population import (
    population_evaluator,
    population_initializer,
    population_runner,
    population_segment,
)
from rlax_trpo.experiment.progress import ProgressBar, StopRequest
from rlax_trpo.report import stats

# A segment call's aim in seconds of work: a signal is honoured within about this much.
SEGMENT_SECONDS = 2.0
# The most iterations one segment call runs, and the most member-iterations its metric
# buffer holds (a large population runs fewer iterations a call).
MAX_SEGMENT, SEGMENT_ROWS = 1024, 2**18


class Start(NamedTuple):
    """Where the run begins: iteration 0, or the state and metrics of its last checkpoint."""

    iteration: int
    state: Any  # None: initialised after compiling
    history: list[dict[str, np.ndarray]]  # metrics so far, [population, iterations] each
    wall_seconds: float  # of the iterations so far
    compile_seconds: float


class Compiled(NamedTuple):
    """The initialiser (None when resuming), the chunk lengths (`lengths`, in order), the run
    program (`segment`, up to `capacity` iterations a call; or, for a single-call run, one
    program per chunk length in `chunks`) and the evaluation."""

    init: Any
    chunks: dict[int, Any]
    lengths: list[int]
    evaluate: Any
    compile_seconds: float  # of the whole run, resumed parts included
    segment: Any = None
    capacity: int = 0


class Trained(NamedTuple):
    """The population after its chunks; `signal`: a signal stopped it early; `unsaved`: its
    final checkpoint could not be written and no earlier one exists (the final phase still
    writes what it computed)."""

    state: Any
    metrics: dict[str, np.ndarray]  # [population, iterations done]
    iterations: int
    wall_seconds: float
    signal: int | None
    unsaved: Exception | None = None


def restore(setup: Setup, bar: ProgressBar) -> Start:
    """Iteration 0, or a resumed run's last checkpoint, placed on the devices."""
    if setup.plan.resume is None or setup.plan.start_over:
        return Start(iteration=0, state=None, history=[], wall_seconds=0.0, compile_seconds=0.0)
    placement = setup.placement
    parallel.meet("restore")  # restoring runs collectives: the processes meet first
    state, so_far, record = checkpoint.restore_step(
        setup.folder.out / "checkpoint", placement.abstract
    )
    start = record.iterations_done
    bar.start = bar.done = start
    return Start(
        iteration=start,
        state=parallel.put(state, placement.state),
        history=[so_far] if start else [],
        wall_seconds=record.wall_seconds,
        compile_seconds=record.compile_seconds,
    )


def compile_run(setup: Setup, start: Start) -> Compiled:
    """The chunk lengths (a chunk ends at every checkpoint, periodic evaluation and log
    write), one compiled program per length, the initialiser of a fresh run and the
    evaluation: everything the run will execute."""
    plan, program, placement = setup.plan, setup.program, setup.placement
    if setup.folder.owner:
        print(
            f"compiling {plan.config.algorithm} on {program.name} for {plan.population} "
            "member(s) ...",
            end="",
            flush=True,
        )
    t0 = time.perf_counter()
    with _traced_on(placement):
        compiled = _compile(setup, start)
    seconds = time.perf_counter() - t0
    if setup.folder.owner:
        print(f" {seconds:.1f} s", flush=True)
    return compiled._replace(compile_seconds=start.compile_seconds + seconds)


def _traced_on(placement) -> Any:
    """The model layout's mesh as the one programs are traced under (its batch split, as
    `rlax_trpo.lm.grpo.shard_rows` asks); no mesh for the other layouts."""
    mesh = placement.population.mesh
    return jax.set_mesh(mesh) if "model" in mesh.axis_names else contextlib.nullcontext()


def _compile(setup: Setup, start: Start) -> Compiled:
    plan, program, placement = setup.plan, setup.program, setup.placement
    log_every = plan.log_every
    if (plan.tensorboard or plan.wandb) and not (log_every or plan.chunked):
        log_every = loggers.default_log_every(plan.total)
    every = (program.eval_every, log_every)
    lengths = _chunk_lengths(start.iteration, plan.total, plan.chunk, *every)
    shared = placement.shared  # passed to every program as its last argument (None: none)
    init = None
    if start.state is None:
        init_fn = jax.jit(
            population_initializer(program),
            in_shardings=(placement.population, placement.population, _placed(shared)),
            out_shardings=placement.state,
        )
        # the memory check's trace
        inputs = unplaced((placement.init_keys, placement.hparams, program.shared))
        init = _with_shared(init_fn.lower(*inputs).compile(), shared)
    # The state a chunk reads is donated: each chunk's state is the last one's output, saved
    # (synchronously) before the next chunk takes it, and never read again, so its buffers
    # hold the new state instead of a second copy of it on the device.
    chunks, segment, capacity = {}, None, segment_capacity(plan.population)
    if plan.single_call:
        run_fn = jax.jit(
            population_runner(program),
            static_argnums=2,
            out_shardings=(placement.state, placement.population),
            donate_argnums=0,
        )
        for k in set(lengths):
            lowered = run_fn.lower(placement.placed, placement.hparams, k, shared)
            chunks[k] = _with_shared(lowered.compile(), shared)
    else:
        segment_fn = jax.jit(
            population_segment(program, capacity),
            out_shardings=(placement.state, placement.population),
            donate_argnums=0,
        )
        count = jax.ShapeDtypeStruct((), jnp.int32)
        lowered = segment_fn.lower(placement.placed, placement.hparams, count, count, shared)
        segment = _with_shared(lowered.compile(), shared)
    # Compiled now too: after compile_run nothing the run calls is compiled any more (the
    # processes of a multi-process run meet once, after it, before their first collective).
    evaluate = jax.jit(population_evaluator(program))
    evaluate = evaluate.lower(placement.placed, placement.eval_keys, shared).compile()
    evaluate = _with_shared(evaluate, shared)
    return Compiled(init, chunks, lengths, evaluate, 0.0, segment, capacity)


def segment_capacity(population: int) -> int:
    """The most iterations one segment call runs for a population of this size."""
    return max(1, min(MAX_SEGMENT, SEGMENT_ROWS // population))


def _placed(shared: Any) -> Any:
    """The shardings the placed `shared` arrays already have (None: nothing)."""
    return jax.tree.map(lambda x: x.sharding, shared)


def _with_shared(compiled: Any, shared: Any) -> Any:
    """A compiled program that takes `shared` as its last argument, with it given."""
    return lambda *args: compiled(*args, shared)


def _chunk_lengths(start: int, total: int, chunk: int, *every: int | None) -> list[int]:
    """The lengths of the compiled chunks from `start` to `total`: a chunk ends at every
    checkpoint (multiples of `chunk`), periodic evaluation and log write (`every`)."""
    ends = set(range(chunk, total, chunk)) | {total}
    for period in every:
        if period:
            ends |= set(range(period, total, period))
    ends = sorted(e for e in ends if e > start)
    if not ends:  # training was done: only the final phase is left
        return []
    return [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]


def train(
    setup: Setup, compiled: Compiled, start: Start, writers: list[Any], stop: StopRequest
) -> Trained:
    """The chunks in order; after each, its metrics (with the periodic evaluation), the
    loggers and, at every multiple of `chunk` and at the end, a checkpoint. A signal stops
    the run after the call it came in, with a checkpoint there (every process of a
    multi-process run at the same call); in a chunked run, so does the divergence of every
    member, after a checkpoint (it keeps the last finite parameters)."""
    plan, placement, spi = setup.plan, setup.placement, setup.program.steps_per_iteration
    t0 = time.perf_counter()
    state = start.state
    if state is None:
        state = jax.block_until_ready(compiled.init(placement.init_keys, placement.hparams))
    wall_s = start.wall_seconds + time.perf_counter() - t0
    history, done, unsaved = list(start.history), start.iteration, None
    pace = Pace(compiled.capacity)
    for k in compiled.lengths:
        t0 = time.perf_counter()
        state, metrics, ran, signum = _run_chunk(setup, compiled, state, k, pace, stop)
        wall_s += time.perf_counter() - t0
        done += ran
        history.append(_chunk_metrics(setup, compiled, metrics, state, done))
        for writer in writers:
            writer.write(history[-1], done - ran, spi)
        at_checkpoint = done % plan.chunk == 0
        saved = (plan.chunked and at_checkpoint) or done == plan.total or signum is not None
        if saved:
            history = [stats.concatenate_chunks(history)]
            try:
                _save(setup, compiled, state, history[0], done, wall_s)
            except checkpoint.CheckpointWriteError as err:
                if not _only_in_memory(setup, done):
                    raise  # an earlier checkpoint is kept: --resume computes the rest again
                unsaved = err  # the final phase goes on: its small files keep the results
        # --resume finishes it; a run whose training is done (or unsaved) is finished now
        if signum is not None and unsaved is None and done < plan.total:
            return Trained(state, history[0], done, wall_s, signum)
        stopping = at_checkpoint and done < plan.total
        if stopping and plan.chunked and _all_diverged(setup, history[0], state):
            break  # nothing left to train; the checkpoint keeps the last finite parameters
    return Trained(state, history[0], done, wall_s, None, unsaved)


class Pace:
    """How many iterations the next segment call runs: about `SEGMENT_SECONDS` of work at
    the speed of the last call (at most `capacity`, at most 8 times the last call's count,
    1 for the first)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.next = capacity, 1

    def after(self, iterations: int, seconds: float) -> None:
        fits = int(SEGMENT_SECONDS * iterations / seconds) if seconds > 0 else self.capacity
        self.next = max(1, min(self.capacity, 8 * iterations, fits))


def _run_chunk(setup: Setup, compiled: Compiled, state, k: int, pace: Pace, stop: StopRequest):
    """`(state, host metrics, iterations run, signal)` of a chunk of `k` iterations: paced
    segment calls until it is done or a signal has come (every process agreeing on both,
    `_agree`); a single-call run's one call."""
    hp = setup.placement.hparams
    if compiled.segment is None:
        state, metrics = jax.block_until_ready(compiled.chunks[k](state, hp))
        signum, _ = _agree(stop, k)
        return state, stats.to_numpy(parallel.to_host(metrics)), k, signum
    horizon, parts, ran, signum = np.int32(setup.program.horizon or 0), [], 0, None
    while ran < k and signum is None:
        n = min(k - ran, pace.next)
        t0 = time.perf_counter()
        state, rows = jax.block_until_ready(compiled.segment(state, hp, np.int32(n), horizon))
        pace.after(n, time.perf_counter() - t0)
        signum, pace.next = _agree(stop, pace.next)
        parts.append({name: m[:, :n] for name, m in stats.to_numpy(parallel.to_host(rows)).items()})
        ran += n
    return state, stats.concatenate_chunks(parts), ran, signum


def _agree(stop: StopRequest, proposed: int) -> tuple[int | None, int]:
    """The signal that stops the run after this call (None: none) and the next call's
    count, the same in every process: a signal any process received, the smallest count."""
    if jax.process_count() == 1:
        return stop.signum, proposed
    mine = np.asarray([stop.signum or 0, proposed], np.int32)
    every = np.asarray(parallel.gather_from_processes(mine)).reshape(-1, 2)
    signals = [int(x) for x in every[:, 0] if x]
    return (signals[0] if signals else None), int(every[:, 1].min())


def _only_in_memory(setup: Setup, done: int) -> bool:
    """Whether a run whose checkpoint after `done` iterations failed holds its results
    nowhere else: its last checkpoint, no earlier one on disk, one process (several go on
    together only through their checkpoint's barriers)."""
    ckpt = setup.folder.out / "checkpoint"
    last = done == setup.plan.total and jax.process_count() == 1
    return last and not checkpoint.saved_steps(ckpt)


def _chunk_metrics(setup: Setup, compiled: Compiled, metrics, state, done: int):
    """A chunk's metrics (on the host), with the periodic evaluation in its last column when
    one is due."""
    program = setup.program
    if program.eval_every and (done % program.eval_every == 0 or done == setup.plan.total):
        scores = compiled.evaluate(state, setup.placement.eval_keys)
        scores = np.asarray(parallel.to_host(scores))
        column = np.full(metrics[next(iter(metrics))].shape, np.nan)
        column[:, -1] = scores.mean(axis=-1)
        metrics[program.eval_metric] = column
    return metrics


def _save(setup: Setup, compiled: Compiled, state, metrics, done: int, wall_s: float) -> None:
    """A checkpoint after `done` iterations, with what --resume checks and continues."""
    plan = setup.plan
    record = plan.record(
        num_devices=setup.placement.num_devices,
        iterations_done=done,
        wall_seconds=wall_s,
        compile_seconds=compiled.compile_seconds,
    )
    checkpoint.save_step(
        setup.folder.out / "checkpoint", state, metrics, record, plan.keep_checkpoints
    )


def _all_diverged(setup: Setup, metrics: dict[str, np.ndarray], state: Any) -> bool:
    """Whether every member diverged (each one that did is frozen; the others go on)."""
    diverged_at = setup.program.diverged_at(state)
    if diverged_at is not None:
        diverged_at = np.asarray(parallel.to_host(diverged_at))
    found = stats.divergence(metrics, diverged_at, setup.plan.seeds, setup.plan.sweep)
    return found is not None and found["count"] == setup.plan.population
