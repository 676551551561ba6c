"""Host-side driver of a `grpo_lm` run: warm start, GRPO in jitted chunks, evaluation, files.

This module is a call site (like train.py): it is where `jax.jit` is applied. Everything it
jits is built from the pure functions of `rlax_trpo.lm`; seeds are vmapped.

    from rlax_trpo.lm.config import load_config
    from rlax_trpo.lm.run import train
    result = train(load_config("configs/grpo_lm_max_digit.yaml", ["num_iterations=50"]))
"""

from __future__ import annotations

import csv
import json
import math
import pathlib
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from rlax_trpo.lm.config import LMConfig, validate
from rlax_trpo.lm.grpo import GRPOState, make_grpo
from rlax_trpo.lm.model import Transformer, init_params
from rlax_trpo.lm.sft import warm_start
from rlax_trpo.lm.tasks import detokenize, eval_set

__all__ = ["LMRun", "main", "train", "validate"]


class LMRun(NamedTuple):
    """Everything a run produced, in host memory (arrays have a leading seed axis)."""

    config: LMConfig
    params: dict  # final policy parameters, [seeds, ...]
    metrics: dict  # name -> [seeds, iterations] np.ndarray
    eval_iterations: np.ndarray  # [K] iterations after which greedy accuracy was measured
    eval_accuracy: np.ndarray  # [seeds, K]
    eval_length: np.ndarray  # [seeds, K]
    initial_accuracy: np.ndarray  # [seeds]
    final_accuracy: np.ndarray  # [seeds]
    warm_start_losses: np.ndarray  # [seeds, warm_start_steps]
    samples_before: list  # (prompt, completion, target) strings, seed 0, greedy
    samples_after: list
    timings: dict  # seconds: compile, warm_start, grpo, eval, wall


# Compiled programs, keyed by everything static they depend on, so that runs differing only in
# traced hyperparameters (or in an unrelated static setting) reuse them within one process.
_COMPILED: dict = {}


def _timed_compile(cache_key, fn, *args):
    """(compiled fn, seconds spent compiling now); 0 s when `cache_key` was compiled before."""
    if cache_key in _COMPILED:
        return _COMPILED[cache_key], 0.0
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    _COMPILED[cache_key] = compiled
    return compiled, time.perf_counter() - start


def _samples(prompts, tokens, targets, n=8) -> list:
    return [
        (detokenize(p), detokenize(c), detokenize(t))
        for p, c, t in zip(
            np.asarray(prompts[:n]), np.asarray(tokens[:n]), np.asarray(targets[:n]), strict=True
        )
    ]


def train(cfg: LMConfig, seeds: int = 1, progress: bool = True) -> LMRun:
    """Train `seeds` policies (vmapped): optional warm start, then GRPO; no files written."""
    wall_start = time.perf_counter()
    task, model_cfg, grpo_cfg, hp = cfg.make_task(), cfg.model_cfg(), cfg.grpo_cfg(), cfg.hparams()
    model = Transformer(model_cfg)
    grpo = make_grpo(model_cfg, task, grpo_cfg)
    hp = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hp)
    eval_prompts, eval_targets = eval_set(task, cfg.eval_size)
    keys = jax.random.split(jax.random.key(cfg.seed), seeds)
    k_init, k_warm, k_grpo = (
        jnp.stack(k) for k in zip(*[jax.random.split(k, 3) for k in keys], strict=True)
    )
    eval_key = jax.random.key(0)  # unused by greedy decoding
    compile_s = 0.0
    task_key = (cfg.task, cfg.num_digits, cfg.reverse_answer)
    static = (model_cfg, task_key, grpo_cfg, seeds)

    init_fn, dt = _timed_compile(
        ("init", model_cfg, seeds), jax.vmap(lambda k: init_params(model, k)), k_init
    )
    compile_s += dt
    params = init_fn(k_init)
    evaluate, dt = _timed_compile(
        ("eval", model_cfg, task_key, grpo_cfg.max_new_tokens, seeds, cfg.eval_size),
        jax.vmap(grpo.evaluate, in_axes=(0, None, None, None)),
        params,
        eval_prompts,
        eval_targets,
        eval_key,
    )
    compile_s += dt

    losses = np.zeros((seeds, 0), np.float32)
    warm_s = 0.0
    if cfg.warm_start_steps > 0:
        warm_fn = jax.vmap(
            lambda p, k, h: warm_start(
                model_cfg, task, p, k, h, cfg.warm_start_steps, cfg.warm_start_batch_size
            ),
            in_axes=(0, 0, None),
        )
        warm_key = ("warm", model_cfg, task_key, seeds, cfg.warm_start_steps)
        warm, dt = _timed_compile(
            warm_key + (cfg.warm_start_batch_size,), warm_fn, params, k_warm, hp
        )
        compile_s += dt
        start = time.perf_counter()
        params, losses = jax.block_until_ready(warm(params, k_warm, hp))
        warm_s = time.perf_counter() - start

    eval_s = 0.0
    start = time.perf_counter()
    before = jax.block_until_ready(evaluate(params, eval_prompts, eval_targets, eval_key))
    eval_s += time.perf_counter() - start

    grpo_init, dt = _timed_compile(
        ("grpo_init", static), jax.vmap(grpo.init, in_axes=(0, 0, None)), k_grpo, params, hp
    )
    compile_s += dt
    state = grpo_init(k_grpo, params, hp)

    def run_chunk(state: GRPOState, hp, length: int):
        return jax.lax.scan(lambda s, _: grpo.iteration(s, hp), state, None, length=length)

    chunks: dict[int, object] = {}
    done, history, eval_its, eval_acc, eval_len = 0, [], [], [], []
    grpo_s = 0.0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.num_iterations, desc=f"grpo_lm {cfg.task}", unit="it")
    while done < cfg.num_iterations:
        length = min(cfg.eval_every, cfg.num_iterations - done)
        if length not in chunks:
            fn = jax.vmap(lambda s, h, n=length: run_chunk(s, h, n), in_axes=(0, None))
            chunks[length], dt = _timed_compile(("chunk", static, length), fn, state, hp)
            compile_s += dt
        start = time.perf_counter()
        state, metrics = jax.block_until_ready(chunks[length](state, hp))
        grpo_s += time.perf_counter() - start
        history.append(jax.device_get(metrics))  # [seeds, length] each
        done += length
        start = time.perf_counter()
        ev = jax.device_get(evaluate(state.params, eval_prompts, eval_targets, eval_key))
        eval_s += time.perf_counter() - start
        eval_its.append(done)
        eval_acc.append(ev["accuracy"])
        eval_len.append(ev["length_mean"])
        if bar is not None:
            bar.update(length)
            bar.set_postfix(
                sample_acc=f"{float(np.mean(metrics['accuracy/sample'][:, -1])):.3f}",
                greedy_acc=f"{float(np.mean(ev['accuracy'])):.3f}",
            )
    if bar is not None:
        bar.close()

    metrics = {k: np.concatenate([h[k] for h in history], axis=1) for k in history[0]}
    after_tokens = ev["tokens"]
    timings = {
        "compile": compile_s,
        "warm_start": warm_s,
        "grpo": grpo_s,
        "eval": eval_s,
        "wall": time.perf_counter() - wall_start,
    }
    return LMRun(
        config=cfg,
        params=jax.device_get(state.params),
        metrics=metrics,
        eval_iterations=np.asarray(eval_its),
        eval_accuracy=np.stack(eval_acc, axis=1),
        eval_length=np.stack(eval_len, axis=1),
        initial_accuracy=np.asarray(before["accuracy"]),
        final_accuracy=np.asarray(ev["accuracy"]),
        warm_start_losses=np.asarray(losses),
        samples_before=_samples(eval_prompts, before["tokens"][0], eval_targets),
        samples_after=_samples(eval_prompts, after_tokens[0], eval_targets),
        timings=timings,
    )


def summarize(run: LMRun) -> dict:
    """The `summary.json` record of a run."""
    cfg, m = run.config, run.metrics
    seeds, iters = m["accuracy/sample"].shape
    batch = cfg.num_prompts * cfg.group_size
    sampled = float(np.sum(m["completion/length_mean"]) * batch)  # all seeds
    grpo_s = max(run.timings["grpo"], 1e-9)
    last = max(1, iters // 10)
    return {
        "algorithm": "grpo_lm",
        "task": cfg.task,
        "num_seeds": seeds,
        "num_iterations": iters,
        "sequences_per_iteration": batch,
        "wall_seconds": run.timings["wall"],
        "compile_seconds": run.timings["compile"],
        "warm_start_seconds": run.timings["warm_start"],
        "grpo_seconds": run.timings["grpo"],
        "eval_seconds": run.timings["eval"],
        "initial_accuracy": float(np.mean(run.initial_accuracy)),
        "final_accuracy": float(np.mean(run.final_accuracy)),
        "initial_accuracy_per_seed": run.initial_accuracy.tolist(),
        "final_accuracy_per_seed": run.final_accuracy.tolist(),
        "eval_size": cfg.eval_size,
        "final_sample_accuracy": float(np.mean(m["accuracy/sample"][:, -last:])),
        "final_completion_length": float(np.mean(m["completion/length_mean"][:, -last:])),
        "sampled_tokens_per_second": sampled / grpo_s,
        "trained_tokens_per_second": sampled * cfg.num_epochs / grpo_s,
        "warm_start_final_loss": (
            float(np.mean(run.warm_start_losses[:, -1])) if run.warm_start_losses.size else None
        ),
        "samples_before": [" ".join(s) for s in run.samples_before],
        "samples_after": [" ".join(s) for s in run.samples_after],
    }


def _write_csv(path: pathlib.Path, run: LMRun) -> None:
    names = sorted(run.metrics)
    seeds, iters = run.metrics[names[0]].shape
    evals = {int(it): j for j, it in enumerate(run.eval_iterations)}
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", *names, "eval/greedy_accuracy"])
        for s in range(seeds):
            for i in range(iters):
                j = evals.get(i + 1)
                acc = "" if j is None else f"{run.eval_accuracy[s, j]:.6g}"
                writer.writerow([s, i + 1, *(f"{run.metrics[n][s, i]:.6g}" for n in names), acc])


def plot(run: LMRun, path: pathlib.Path | None = None):
    """Accuracy and completion length against iteration: mean and min-max band over seeds."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    x = np.arange(1, run.metrics["accuracy/sample"].shape[1] + 1)
    for key, label in (("accuracy/sample", "sampled (train)"), ("reward/mean", "reward")):
        y = run.metrics[key]
        axes[0].plot(x, y.mean(0), label=label)
        axes[0].fill_between(x, y.min(0), y.max(0), alpha=0.2)
    ev_x = np.concatenate([[0], run.eval_iterations])  # 0: after the warm start, before GRPO
    ev = np.concatenate([run.initial_accuracy[:, None], run.eval_accuracy], axis=1)
    axes[0].plot(ev_x, ev.mean(0), "o-", label="greedy, held-out")
    axes[0].fill_between(ev_x, ev.min(0), ev.max(0), alpha=0.2)
    axes[0].set(
        xlabel="GRPO iteration", ylabel="accuracy", title=f"{run.config.task}", ylim=(0, 1.02)
    )
    axes[0].legend(loc="lower right")
    y = run.metrics["completion/length_mean"]
    axes[1].plot(x, y.mean(0))
    axes[1].fill_between(x, y.min(0), y.max(0), alpha=0.2)
    axes[1].set(xlabel="GRPO iteration", ylabel="tokens", title="completion length (sampled)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig


def write_run(run: LMRun, out_dir: pathlib.Path, raw: dict | None = None) -> dict:
    """Write config.yaml, metrics.csv, summary.json, learning_curve.png, checkpoint/."""
    from flax import serialization

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    resolved = run.config.model_dump()
    resolved["num_digits"] = run.config.num_digits or _default_digits(run.config)
    resolved["max_new_tokens"] = run.config.completion_len()
    (out_dir / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    _write_csv(out_dir / "metrics.csv", run)
    summary = summarize(run)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    plot(run, out_dir / "learning_curve.png")
    ckpt = out_dir / "checkpoint"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "params.msgpack").write_bytes(serialization.to_bytes(run.params))
    (ckpt / "model.json").write_text(json.dumps(run.config.model_cfg()._asdict()))
    return summary


def _default_digits(cfg: LMConfig) -> int:
    from rlax_trpo.lm.config import DEFAULT_DIGITS

    return DEFAULT_DIGITS[cfg.task]


def main(raw: dict, out_dir: pathlib.Path, seeds: int = 1, progress: bool = True) -> dict:
    """Entry point for `train.py`: validate (ConfigError before any file), train, write, summary."""
    cfg = validate(raw)
    if seeds < 1 or not math.isfinite(seeds):
        from rlax_trpo.errors import ConfigError

        raise ConfigError(f"seeds: must be >= 1 (got {seeds!r})")
    run = train(cfg, seeds=seeds, progress=progress)
    return write_run(run, pathlib.Path(out_dir), raw)
