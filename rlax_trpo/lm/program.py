"""A `grpo_lm` run as a `Program`: the tiny model's on a generated task, or a pretrained
model's (`model_path`: `rlax_trpo.lm.pretrained_program`).

The tiny model's `init(key, hp)`: transformer initialisation -> supervised warm start
(optional; its result is pi_ref) -> greedy accuracy on the held-out prompts -> GRPO state.
The iterations, evaluation and summary are every language-model run's
(`rlax_trpo.lm.run_program`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rlax_trpo.config.configuration import Config
from rlax_trpo.lm.grpo import make_grpo
from rlax_trpo.lm.model import Transformer, init_params
from rlax_trpo.lm.pretrained_program import make_pretrained_program
from rlax_trpo.lm.run_program import LMTrainState, lm_program
from rlax_trpo.lm.sft import warm_start
from rlax_trpo.types import Program


def make_lm_program(cfg: Config, progress: Any = None) -> Program:
    """The `Program` of a `grpo_lm` configuration (host side, before any tracing): the tiny
    model's, or a pretrained model's (`model_path`, `rlax_trpo.lm.pretrained_program`)."""
    if cfg.model_path is not None:
        return make_pretrained_program(cfg, progress)
    task, model_cfg, grpo_cfg = cfg.make_task(), cfg.model_cfg(), cfg.grpo_cfg()
    model = Transformer(model_cfg)
    grpo = make_grpo(model_cfg, task, grpo_cfg)
    prompts = grpo.task.eval_prompts(None, cfg.eval_size)
    eval_key = jax.random.key(0)  # unused by greedy decoding

    def accuracy(params) -> jax.Array:
        return grpo.evaluate(params, prompts, eval_key)["accuracy"]

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

    return lm_program(cfg, grpo, init, accuracy, progress)
