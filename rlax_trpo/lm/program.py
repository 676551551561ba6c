"""A `grpo_lm` run as a `Program`: initialise, warm start, GRPO iterations, greedy evaluation.

`experiment.run` drives it exactly like a control run (population of seeds, compiled chunks,
orbax checkpoints, signals, the run folder):

    init(key, hp)    transformer initialisation -> supervised warm start (optional; its
                     result is pi_ref) -> greedy accuracy on the held-out prompts -> GRPO state
    run(state, hp, n)  n GRPO iterations in one `lax.scan`
    evaluate(state)  greedy exact-match accuracy on the held-out prompts, `[1]`

The held-out accuracy is also recorded every `eval_every` iterations (`eval/greedy_accuracy`).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.config.configuration import Config
from rlax_trpo.lm.grpo import make_grpo
from rlax_trpo.lm.model import Transformer, init_params
from rlax_trpo.lm.sft import warm_start
from rlax_trpo.lm.tasks import eval_set
from rlax_trpo.lm.types import LMGRPOState
from rlax_trpo.types import Program


@flax.struct.dataclass
class LMTrainState:
    """The carry of a `grpo_lm` run: the GRPO state and what the warm start left behind."""

    grpo: LMGRPOState
    initial_accuracy: jax.Array  # greedy held-out accuracy after the warm start, before GRPO
    warm_start_loss: jax.Array  # the last supervised loss (NaN without a warm start)


def make_lm_program(cfg: Config, progress: Any = None) -> Program:
    """The `Program` of a `grpo_lm` configuration (host side, before any tracing)."""
    task, model_cfg, grpo_cfg = cfg.make_task(), cfg.model_cfg(), cfg.grpo_cfg()
    model = Transformer(model_cfg)
    grpo = make_grpo(model_cfg, task, grpo_cfg)
    prompts, targets = eval_set(task, cfg.eval_size)
    eval_key = jax.random.key(0)  # unused by greedy decoding

    def accuracy(params) -> jax.Array:
        return grpo.evaluate(params, prompts, targets, eval_key)["accuracy"]

    def init(key: jax.Array, hp) -> LMTrainState:
        k_init, k_warm, k_grpo = jax.random.split(key, 3)
        params = init_params(model, k_init)
        loss = jnp.full((), jnp.nan)
        if cfg.warm_start_steps > 0:
            params, losses = warm_start(
                model_cfg, task, params, k_warm, hp, cfg.warm_start_steps, cfg.warm_start_batch_size
            )
            loss = losses[-1]
        return LMTrainState(grpo.init(k_grpo, params, hp), accuracy(params), loss)

    def iteration(state: LMTrainState, hp) -> tuple[LMTrainState, dict]:
        inner, metrics = grpo.iteration(state.grpo, hp)
        if progress is not None:
            jax.debug.callback(progress, state.grpo.step, metrics["accuracy/sample"])
        return state.replace(grpo=inner), metrics

    def run(state: LMTrainState, hp, num_iterations: int):
        return jax.lax.scan(lambda s, _: iteration(s, hp), state, None, length=num_iterations)

    def evaluate(state: LMTrainState, key: jax.Array) -> jax.Array:
        return accuracy(state.grpo.params)[None]

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
    )
