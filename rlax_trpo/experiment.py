"""A run: the population of seeds x settings, devices, compilation, chunks and checkpoints,
signals, evaluation and the run folder. `train.py` and notebooks call `run`.

    from rlax_trpo import Config, experiment
    result = experiment.run(Config.create(env="Acrobot-v1"), seeds=4, out="runs/acrobot")
    result.summary["final_return_mean"], result.metrics["episode/return"]  # [4, iterations]

Every member of the population (member m = setting m // seeds, seed m % seeds) runs inside
one compiled, vmapped call, sharded over the devices. This module is a call site: it applies
`jax.jit` to the pure functions of a `Program` (`rlax_trpo.program`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import yaml

from rlax_trpo import checkpoint, loggers, parallel, report, stats
from rlax_trpo import sweep as sweeplib
from rlax_trpo.errors import ConfigError
from rlax_trpo.program import make_program
from rlax_trpo.progress import ProgressBar, StopRequest


class _Plan(NamedTuple):  # a run's checked inputs
    config: Any
    seeds: int
    seed: int
    sweep: sweeplib.Sweep
    out: Path
    chunk_iterations: int | None
    resuming: bool
    devices: int | None
    shard: str
    progress: bool
    tensorboard: bool
    wandb: dict[str, Any] | None
    log_every: int | None


class RunResult(NamedTuple):
    """What `run` returns. `status`: "complete", "diverged" or "interrupted" (by a signal,
    after a checkpoint; `signal` names it). Arrays are host numpy, population first."""

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
) -> RunResult:
    """Train a population and write its run folder; every input is checked before any write.

    Args:
      config: a `Config`, or a language-model config (`rlax_trpo.lm.config`); optional with
        `resume`, where it must match the saved one.
      seeds, seed: seeds per setting (default 1) and the base PRNG seed (default 0).
      sweep: hyperparameter settings (`sweep.parse_sweeps`); each runs with every seed.
      out: the run folder (default `runs/<algorithm>_<env>_<time>`); must not hold files.
      chunk_iterations: run in compiled chunks of this many iterations with a checkpoint
        after each; SIGINT/SIGTERM then stop cleanly after the current chunk.
      resume: a run folder to continue from its last checkpoint.
      devices, shard: how many devices, and whether the population or each run's
        environments are split over them (`parallel`).
      progress: a tqdm progress bar.
      tensorboard, wandb, log_every: TensorBoard event files; Weights & Biases runs
        (`{"project": ..., "name": ...}`); written every `log_every` iterations
        (`rlax_trpo.loggers`).

    Raises:
      ConfigError: bad input (one line naming it); nothing has been written then.
    """
    for flag, value in (
        ("--seeds", seeds),
        ("--chunk-iterations", chunk_iterations),
        ("--log-every", log_every),
    ):
        if value is not None and value < 1:
            raise ConfigError(f"{flag}: must be a positive integer (got {value})")
    if resume is not None:
        resume = Path(resume)
        if out is not None:
            raise ConfigError("--out: a resumed run continues in its own folder; drop --out")
        saved = checkpoint.plan_resume(resume, config, seeds, seed, sweep)
        config, seeds, seed, sweep = saved.config, saved.seeds, saved.seed, saved.sweep
        chunk_iterations = chunk_iterations or saved.chunk_iterations
        out = resume
    elif config is None:
        raise ConfigError("run: a config is needed (or resume=<run folder>)")
    out = Path(out) if out is not None else None
    if resume is None and out is not None and out.exists():
        if not out.is_dir() or any(out.iterdir()):
            raise ConfigError(f"--out: {str(out)!r} exists and is not an empty directory")
    loggers.check_available(tensorboard, wandb)
    name = getattr(config, "env", None) or getattr(config, "task", "run")
    out = out or Path("runs") / f"{config.algorithm}_{name}_{dt.datetime.now():%Y%m%d-%H%M%S}"
    sweep, resuming = sweep or sweeplib.NO_SWEEP, resume is not None
    plan = _Plan(config, seeds or 1, seed or 0, sweep, out, chunk_iterations, resuming,
                 devices, shard, progress, tensorboard, wandb, log_every)  # fmt: skip
    # Chunked runs take SIGINT/SIGTERM from the start (compilation included).
    chunked = chunk_iterations is not None
    with StopRequest() if chunked else contextlib.nullcontext(StopRequest()) as stop:
        return _run(plan, stop)


def _chunk_lengths(start: int, total: int, chunk: int, *every: int | None) -> list[int]:
    """The lengths of the compiled chunks from `start` to `total`: a chunk ends at every
    checkpoint (multiples of `chunk`), periodic evaluation and log write (`every`)."""
    ends = set(range(chunk, total, chunk)) | {total}
    for period in every:
        if period:
            ends |= set(range(period, total, period))
    ends = sorted(e for e in ends if e > start)
    return [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]


def _run(plan: _Plan, stop: StopRequest) -> RunResult:
    config, seeds, sweep, out = plan.config, plan.seeds, plan.sweep, plan.out
    settings = sweep.settings or [{}]
    population = len(settings) * seeds
    total = config.num_iterations
    chunked = plan.chunk_iterations is not None
    chunk = min(plan.chunk_iterations or total, total)
    main_proc = jax.process_index() == 0
    bar = ProgressBar(total, 0, plan.progress and main_proc, population)
    program = make_program(config, progress=bar)  # ConfigError for bad names and sizes
    bar.steps_per_iteration = program.steps_per_iteration
    fields = getattr(program.hparams, "_fields", None) or vars(program.hparams)
    for name in sweep.names:
        if name.removeprefix("hp.") not in fields:
            raise ConfigError(f"--sweep {name}: not a hyperparameter of {config.algorithm}")
    num_devices = parallel.choose_num_devices(
        plan.devices, population, program.num_envs, plan.shard
    )
    mesh = parallel.make_mesh(num_devices, plan.shard)
    pop_sharding = parallel.population_sharding(mesh)
    hps = parallel.put(sweeplib.population_hparams(program.hparams, sweep, seeds), pop_sharding)
    key_data = parallel.put(
        sweeplib.population_key_data(plan.seed, seeds, len(settings)), pop_sharding
    )

    def init_population(kd, hp):
        return jax.vmap(program.init)(jax.random.wrap_key_data(kd), hp)

    def evaluate_population(state, kd):
        return jax.vmap(program.evaluate)(state, jax.random.wrap_key_data(kd))

    abstract = jax.eval_shape(init_population, key_data, hps)
    shardings = parallel.state_shardings(abstract, mesh)
    placed = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    meta: dict[str, Any] = {}
    start, history = 0, []
    if plan.resuming:
        state, so_far, meta = checkpoint.restore_step(out / "checkpoint", abstract)
        state = parallel.put(state, shardings)
        start = int(meta["iterations_done"])
        history = [so_far] if start else []
        bar.start = bar.done = start
    init_fn = jax.jit(init_population, out_shardings=shardings)
    run_fn = jax.jit(
        jax.vmap(program.run, in_axes=(0, 0, None)),
        static_argnums=2,
        out_shardings=(shardings, pop_sharding),
    )
    eval_fn = jax.jit(evaluate_population)

    # Chunked runs work in the run folder itself (so --resume finds it); others in a
    # temporary folder renamed at the end (a run folder is whole or absent).
    work = out if chunked else out.parent / f".{out.name}.tmp-{parallel.run_token()}"
    writers: list[Any] = []
    try:
        if main_proc:
            work.mkdir(parents=True, exist_ok=True)
            (work / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
            writers = loggers.open_writers(
                work,
                out.name,
                config.to_dict(),
                settings,
                seeds,
                plan.seed,
                plan.tensorboard,
                plan.wandb,
            )
            print(
                f"compiling {config.algorithm} on {program.name} for {population} member(s) ...",
                end="",
                flush=True,
            )
        t0 = time.perf_counter()
        log_every = plan.log_every
        if (plan.tensorboard or plan.wandb) and not (log_every or chunked):
            log_every = loggers.default_log_every(total)
        lengths = _chunk_lengths(start, total, chunk, program.eval_every, log_every)
        if not plan.resuming:
            init_compiled = init_fn.lower(key_data, hps).compile()
        compiled = {k: run_fn.lower(placed, hps, k).compile() for k in set(lengths)}
        compile_s = time.perf_counter() - t0
        if main_proc:
            print(f" {compile_s:.1f} s", flush=True)
        t0 = time.perf_counter()
        if not plan.resuming:
            state = jax.block_until_ready(init_compiled(key_data, hps))
        wall_s = float(meta.get("wall_seconds", 0.0)) + time.perf_counter() - t0
        facts = {
            "config": config.to_dict(),
            "seeds": seeds,
            "seed": plan.seed,
            "sweep": sweep.to_dict(),
            "num_iterations": total,
            "chunk_iterations": chunk,
            "population": population,
            "num_devices": num_devices,
        }
        compile_total = float(meta.get("compile_seconds", 0.0)) + compile_s
        eval_keys = parallel.put(
            sweeplib.population_key_data(plan.seed + 1, seeds, len(settings)), pop_sharding
        )
        done = start
        for k in lengths:
            t0 = time.perf_counter()
            state, chunk_metrics = jax.block_until_ready(compiled[k](state, hps))
            wall_s += time.perf_counter() - t0
            chunk_metrics = stats.to_numpy(parallel.to_host(chunk_metrics))
            done += k
            if program.eval_every and (done % program.eval_every == 0 or done == total):
                scores = np.asarray(parallel.to_host(eval_fn(state, eval_keys)))
                column = np.full(chunk_metrics[next(iter(chunk_metrics))].shape, np.nan)
                column[:, -1] = scores.mean(axis=-1)
                chunk_metrics[program.eval_metric] = column
            history.append(chunk_metrics)
            for writer in writers:
                writer.write(chunk_metrics, done - k, program.steps_per_iteration)
            if (chunked and done % chunk == 0) or done == total:
                history = [stats.concatenate_chunks(history)]
                checkpoint.save_step(
                    work / "checkpoint",
                    state,
                    history[0],
                    {
                        **facts,
                        "iterations_done": done,
                        "wall_seconds": wall_s,
                        "compile_seconds": compile_total,
                    },
                    config,
                )
            if stop.signum is not None and done < total and done % chunk == 0:
                bar.close()
                return RunResult(out, "interrupted", None, history[0], None, stop.signum)
            if chunked and done < total and done % chunk == 0 and _diverged(history[0], state):
                break  # the checkpoint just written keeps the last finite parameters
        bar.close()
        metrics = history[0]
        scores = np.asarray(parallel.to_host(eval_fn(state, eval_keys)))
        host_state = parallel.to_host(checkpoint.to_savable(state))
        steps = done * program.steps_per_iteration
        summary = {
            "algorithm": config.algorithm,
            "env": program.name,
            "num_seeds": seeds,
            "num_settings": len(settings),
            "population": population,
            "total_env_steps": steps,
            "unit": program.unit,
            "num_iterations": total,
            "iterations_done": done,
            "chunk_iterations": chunk,
            "compiled_run_programs": len(compiled),
            "wall_seconds": wall_s,
            "compile_seconds": compile_total,
            "env_steps_per_second": steps * population / wall_s,
            "num_devices": num_devices,
            "device_layout": plan.shard,
            **parallel.describe_devices(),
        }
        if sweep.names:
            summary["swept"] = sweep.to_dict()
        summary.update(program.summarize(metrics, scores, host_state, sweep, seeds, summary))
        diverged = report.divergence(metrics, getattr(host_state, "diverged_at", None), seeds)
        if diverged is not None:
            summary["diverged"] = diverged
        _close(writers)
        if main_proc:
            report.write_run_files(
                work, metrics, summary, sweep, program.steps_per_iteration, program.curve
            )
            if work != out:
                if out.exists():
                    out.rmdir()  # checked empty before anything was written
                work.rename(out)
    finally:
        bar.close()
        _close(writers)
        if main_proc and work != out and work.exists():  # process 0 owns the folder
            shutil.rmtree(work, ignore_errors=True)
    status = "diverged" if "diverged" in summary else "complete"
    return RunResult(out, status, summary, metrics, host_state)


def _close(writers: list[Any]) -> None:
    while writers:  # each closes once, also when a later step raises
        writers.pop().close()


def _diverged(metrics: dict[str, np.ndarray], state: Any) -> bool:
    """Whether a metric became non-finite or a member skipped a non-finite update."""
    diverged_at = getattr(state, "diverged_at", None)
    if diverged_at is not None:
        diverged_at = np.asarray(parallel.to_host(diverged_at))
    return report.divergence(metrics, diverged_at, 1) is not None
