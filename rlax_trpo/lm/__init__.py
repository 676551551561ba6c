"""GRPO for question-answer language models, the whole iteration compiled.

Its records (`types`, imported by every other module here), a tiny decoder-only transformer
(`model`), a KV-cache sampler in `lax.scan` (`sampling`), tasks with verifiable rewards
(`tasks`), the GRPO loss family (`objectives`), the GRPO iteration (`grpo`), a supervised warm
start (`sft`), configuration (`config`) and the `Program` that `rlax_trpo.experiment.run`
compiles and drives to write a run folder (`program`).
"""

from rlax_trpo.lm.grpo import GRPO, make_grpo
from rlax_trpo.lm.model import KVCache, ModelConfig, Transformer, init_cache, init_params
from rlax_trpo.lm.objectives import aggregate_loss
from rlax_trpo.lm.sampling import Completion, completion_logits, sample, token_logprobs
from rlax_trpo.lm.tasks import Task, add_task, make_task, max_digit_task, score, sort_task
from rlax_trpo.lm.types import LMBatch, LMGRPOConfig, LMGRPOState, LMHParams

__all__ = [
    "GRPO",
    "Completion",
    "LMBatch",
    "LMGRPOConfig",
    "LMGRPOState",
    "LMHParams",
    "KVCache",
    "ModelConfig",
    "Task",
    "Transformer",
    "add_task",
    "aggregate_loss",
    "completion_logits",
    "init_cache",
    "init_params",
    "make_grpo",
    "make_task",
    "max_digit_task",
    "sample",
    "score",
    "sort_task",
    "token_logprobs",
]
