"""The `Program` of any language-model run, given its GRPO iteration and initialisation.

`experiment.run` drives it exactly like a control run (population of seeds, compiled chunks,
orbax checkpoints, signals, the run folder):

    init(key, hp, *shared)      the run's own (`rlax_trpo.lm.program`, `.pretrained_program`)
    run(state, hp, n, *shared)  n GRPO iterations in one `lax.scan`
    evaluate(state, key, *shared)  greedy exact-match accuracy on the held-out prompts, `[1]`

The held-out accuracy is also recorded every `eval_every` iterations (`eval/greedy_accuracy`).
`shared` is there only where the run has arrays every member reads (`Program.shared`).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import numpy as np

from rlax_trpo.config.configuration import Config
from rlax_trpo.lm.types import LMGRPOState
from rlax_trpo.types import Program


@flax.struct.dataclass
class LMTrainState:
    """The carry of a `grpo_lm` run: the GRPO state and what the warm start left behind."""

    grpo: LMGRPOState
    initial_accuracy: jax.Array  # greedy held-out accuracy after the warm start, before GRPO
    warm_start_loss: jax.Array  # the last supervised loss (NaN without a warm start)


def lm_program(cfg: Config, grpo, init, accuracy, progress: Any = None, shared: Any = None):
    """The `Program` of a language-model run whose GRPO is `grpo`: `init(key, hp, *extra)`
    gives its `LMTrainState`, `accuracy(params, *extra)` the greedy held-out accuracy, with
    `extra` = (`shared`,) where the run has shared arrays (`Program.shared`), else ()."""

    def iteration(state: LMTrainState, hp, *extra) -> tuple[LMTrainState, dict]:
        inner, metrics = grpo.iteration(state.grpo, hp, *extra)
        if progress is not None:
            jax.debug.callback(progress, state.grpo.step, metrics["accuracy/sample"])
        return state.replace(grpo=inner), metrics

    def run(state: LMTrainState, hp, num_iterations: int, *extra):
        step = lambda s, _: iteration(s, hp, *extra)
        return jax.lax.scan(step, state, None, length=num_iterations)

    def evaluate(state: LMTrainState, key: jax.Array, *extra) -> jax.Array:
        return accuracy(state.grpo.params, *extra)[None]

    def summarize(metrics, scores, state, sweep, seeds, facts) -> dict[str, Any]:
        sample_acc = metrics["accuracy/sample"]
        last = max(1, sample_acc.shape[1] // 10)
        batch = cfg.num_prompts * cfg.group_size
        sampled = float(np.sum(metrics["completion/length_mean"]) * batch)  # all seeds
        wall = max(facts["wall_seconds"], 1e-9)
        initial, final = np.asarray(state.initial_accuracy), np.asarray(scores)[:, 0]
        warm = np.asarray(state.warm_start_loss)
        return {
            "task": cfg.task,
            "eval_size": cfg.eval_size,
            "sequences_per_iteration": batch,
            "initial_accuracy": float(initial.mean()),
            "final_accuracy": float(final.mean()),
            "initial_accuracy_per_seed": initial.tolist(),
            "final_accuracy_per_seed": final.tolist(),
            "final_sample_accuracy": float(np.mean(sample_acc[:, -last:])),
            "final_completion_length": float(np.mean(metrics["completion/length_mean"][:, -last:])),
            "sampled_tokens_per_second": sampled / wall,
            "trained_tokens_per_second": sampled * cfg.num_epochs / wall,
            "warm_start_final_loss": float(warm.mean()) if np.isfinite(warm).all() else None,
            **({} if shared is None else {"model_path": cfg.model_path}),
        }

    return Program(
        name=f"lm/{cfg.task}",
        run_name=cfg.task,
        hparams=cfg.hp,
        hparam_names=tuple(type(cfg.hp).names()),
        init=init,
        run=run,
        evaluate=evaluate,
        steps_per_iteration=cfg.num_prompts * cfg.group_size,
        num_iterations=cfg.num_iterations,
        unit="sequences",
        num_envs=None,
        eval_every=cfg.eval_every,
        eval_metric="eval/greedy_accuracy",
        curve="accuracy/sample",
        summarize=summarize,
        diverged_at=lambda state: None,  # GRPO for LMs applies every update
        shared=shared,
        horizon=cfg.num_iterations,
    )
