"""Configuration of a GRPO language-model run (`algorithm: grpo_lm`).

The same loader, override parser, sweep and error formatting as control runs
(`rlax_trpo.config`): `LMFields` are the fields of the language-model kind (task, model,
iterations, warm start, evaluation), `GRPOLMFields` the algorithm's section and `LMHParams`
(`rlax_trpo.lm.types`) its `hp:` section; `SPEC` registers them as `grpo_lm`. These fields
are the only place the language-model GRPO's defaults and checks are declared: code that
builds it directly reads them from a configuration too,

    config = load_config("grpo_lm_max_digit", ["num_iterations=50"])
    config = Config.create(algorithm="grpo_lm", task="sort", group_size=4)  # or in Python
    config.make_task(), config.model_cfg(), config.grpo_cfg(), config.hp
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rlax_trpo.algorithms.base import AlgorithmSpec
from rlax_trpo.config.fields import RunFields, Section, read_with
from rlax_trpo.lm.hf.model import PROJECTIONS
from rlax_trpo.lm.model import ModelConfig
from rlax_trpo.lm.objectives import (
    CLIP_LOSS_TYPES,
    DPPO_LOSS_TYPES,
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    LOSS_TYPES,
)
from rlax_trpo.lm.tasks import VOCAB_SIZE, Task, make_task
from rlax_trpo.lm.types import LMGRPOConfig, LMHParams
from rlax_trpo.lm.word_problems import DEFAULT_KINDS, KINDS

DEFAULT_DIGITS = {"max_digit": 5, "sort": 4, "add": 3}
GENERATED_TASKS = ("max_digit", "sort", "add")  # the tiny model's
TEXT_TASKS = ("word_problems", "jsonl")  # a pretrained model's, through its tokenizer
INSTRUCTION = "Solve it step by step, then write the answer after ####."
# fields of a pretrained model's run (`model_path`), at their defaults in a tiny model's
PRETRAINED_ONLY = (
    *("dtype", "lora", "chat_template", "system_prompt", "instruction", "remat"),
    *("logprob_chunk", "num_problems", "data_path", "eval_path", "max_prompt_len", "rewards"),
    "problem_kinds",
)
TINY_ONLY = ("model", "num_digits", "reverse_answer", "warm_start_steps")
SAPO_HPARAMS = ("hp.sapo_temperature_pos", "hp.sapo_temperature_neg")
DPPO_HPARAMS = {  # hp name -> the loss types that read it
    **dict.fromkeys(("hp.dppo_tv_low", "hp.dppo_tv_high"), ("dppo_tv",)),
    **dict.fromkeys(("hp.dppo_kl_low", "hp.dppo_kl_high"), ("dppo_kl",)),
    "hp.dppo_ratio_cap": DPPO_LOSS_TYPES,
}
# the Adam update's settings, and the trust-region steps'
ADAM_ONLY = ("num_epochs", "num_minibatches", "loss_type")
ADAM_ONLY += ("hp.learning_rate", "hp.max_grad_norm", "hp.adam_eps")
ADAM_ONLY += ("hp.clip_eps_low", "hp.clip_eps_high")
TRUST_REGION_HPARAMS = ("hp.max_kl", "hp.cg_damping", "hp.cg_tol")
LINE_SEARCH = ("line_search_steps", "hp.line_search_decay", "hp.kl_slack")
VESPO_HPARAMS = ("hp.vespo_k_pos", "hp.vespo_lambda_pos", "hp.vespo_k_neg", "hp.vespo_lambda_neg")


class ModelSection(Section):
    """The `model:` section: the transformer's depth, width, heads, MLP ratio and dtype."""

    num_layers: int = Field(2, ge=1)
    d_model: int = Field(64, ge=8)
    num_heads: int = Field(4, ge=1)
    mlp_ratio: int = Field(4, ge=1)
    dtype: Literal["float32", "bfloat16"] = "float32"

    @model_validator(mode="after")
    def _heads_divide_width(self):
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by num_heads")
        return self


class LoraSection(Section):
    """The `lora:` section: low-rank adapters (Hu et al. 2021) on the named projections of a
    pretrained model; only they train, and the frozen model with them off (they start at
    zero) is the reference policy. `lora: null` trains every parameter instead."""

    rank: int = Field(16, ge=1)
    alpha: float = Field(32.0, gt=0)
    targets: tuple[Literal[PROJECTIONS], ...] = Field(PROJECTIONS, min_length=1)


class LMFields(RunFields):
    """The fields of every language-model run: task, model, length, warm start, evaluation.

    A tiny model (the `model:` section) trains on the generated tasks; a pretrained Hugging
    Face checkpoint (`model_path`) on word problems or a user's JSONL file, through its own
    tokenizer, with LoRA or with every parameter."""

    algorithm: str = "grpo_lm"
    task: Literal[GENERATED_TASKS + TEXT_TASKS] = "max_digit"
    # A pretrained model: a Hugging Face folder (config.json, *.safetensors, tokenizer.json)
    model_path: str | None = None
    dtype: Literal["float32", "bfloat16"] = "float32"  # compute dtype; norms, softmax fp32
    lora: LoraSection | None = LoraSection()
    chat_template: Literal["auto", "chatml", "llama3", "none"] = "auto"
    system_prompt: str | None = None
    instruction: str = INSTRUCTION  # after each question
    remat: bool = False  # recompute each layer in the backward pass (less memory)
    logprob_chunk: int = Field(64, ge=1)  # completion positions whose logits exist at once
    num_problems: int = Field(20000, ge=10)  # generated word problems (both splits)
    problem_kinds: tuple[Literal[KINDS], ...] = Field(DEFAULT_KINDS, min_length=1)
    data_path: str | None = None  # task jsonl: {"prompt", "answer"} rows
    eval_path: str | None = None  # its held-out rows (default: a fixed tenth of data_path's)
    max_prompt_len: int | None = Field(None, ge=1)
    rewards: dict[str, float] = {"exact": 1.0, "format": 0.1}
    num_digits: int | None = Field(None, ge=1, le=9)  # default: DEFAULT_DIGITS[task]
    reverse_answer: bool = True
    max_new_tokens: int | None = Field(None, ge=1)  # default: the answer and EOS
    model: ModelSection = ModelSection()
    num_iterations: int = Field(300, ge=1)
    warm_start_steps: int = Field(0, ge=0)  # supervised steps before GRPO (its result: pi_ref)
    warm_start_batch_size: int = Field(64, ge=1)
    eval_size: int = Field(1000, ge=1)  # held-out prompts for the greedy accuracy
    eval_every: int = Field(25, ge=1)
    seed: int = 0  # the task's held-out set and nothing else (the run's seeds are --seed)

    read_only_with = {  # the warm start's settings, read only when there is one
        "warm_start_batch_size": read_with("warm_start_steps"),
        "hp.warm_start_learning_rate": read_with("warm_start_steps"),
    }

    @model_validator(mode="after")
    def _one_kind_of_model(self):
        pretrained = self.model_path is not None
        if pretrained != (self.task in TEXT_TASKS):
            needs = "needs model_path" if not pretrained else f"needs one of {TEXT_TASKS}"
            what = f"task {self.task}" if not pretrained else "model_path"
            raise ValueError(f"{what}: {needs} (a pretrained model and its tokenizer)")
        unread = TINY_ONLY if pretrained else PRETRAINED_ONLY
        for name in unread:
            if getattr(self, name) != type(self).model_fields[name].default:
                who = "a tiny model (no model_path)" if pretrained else "model_path"
                raise ValueError(f"{name}: read only with {who}")
        if (self.task == "jsonl") != (self.data_path is not None):
            raise ValueError("data_path: needed by task jsonl, and read only with it")
        if self.eval_path is not None and self.data_path is None:
            raise ValueError("eval_path: read only with data_path")
        return self

    @field_validator("rewards")
    @classmethod
    def _known_rewards(cls, rewards: dict[str, float]) -> dict[str, float]:
        from rlax_trpo.lm.answers import REWARDS

        if not rewards:
            raise ValueError("needs at least one reward")
        for name in rewards:
            if name not in REWARDS:
                raise ValueError(f"{name!r} is not a reward (known: {', '.join(REWARDS)})")
        return rewards

    @model_validator(mode="after")
    def _room_for_the_answer(self):
        if self.model_path is not None:
            if self.max_new_tokens is None:
                raise ValueError("max_new_tokens: a pretrained model's run needs a budget")
            return self
        task = self.make_task()
        if self.max_new_tokens is not None and self.max_new_tokens < task.answer_len + 1:
            raise ValueError(
                f"max_new_tokens: must be >= {task.answer_len + 1} for task {self.task} "
                f"(answer and EOS)"
            )
        return self

    # ---- builders (host side)
    def make_task(self) -> Task:
        """The task, with its default number of digits (`DEFAULT_DIGITS`) where none is set."""
        digits = self.num_digits or DEFAULT_DIGITS[self.task]
        return make_task(self.task, digits, self.reverse_answer)

    def completion_len(self) -> int:
        """The completion budget: `max_new_tokens`, else the task's answer and EOS."""
        return self.max_new_tokens or self.make_task().answer_len + 1

    def model_cfg(self) -> ModelConfig:
        """The transformer's `ModelConfig`: the `model:` section, and a context as long as a
        prompt and its completion budget."""
        task = self.make_task()
        return ModelConfig(
            vocab_size=VOCAB_SIZE,
            max_len=task.prompt_len + self.completion_len(),
            **self.model.model_dump(),
        )


class GRPOLMFields(Section):
    """GRPO on sampled completions: groups of `group_size` per prompt, the loss type (TRL
    1.16's family) and its importance-sampling level and aggregation, reward scaling, KL to the
    reference policy. `LMGRPOConfig` (`grpo_cfg()`) documents each field,
    `rlax_trpo.lm.objectives.policy_loss` each loss type."""

    num_prompts: int = Field(32, ge=1)
    group_size: int = Field(16, ge=2)
    num_epochs: int = Field(1, ge=1)
    num_minibatches: int = Field(1, ge=1)
    # the names `rlax_trpo.lm.objectives` implements, from its tables
    loss_type: Literal[tuple(LOSS_TYPES)] = "grpo"
    importance_sampling_level: Literal[IMPORTANCE_SAMPLING_LEVELS] = "token"
    kl_bias_correction: bool = False  # KL x importance ratio (TRL's use_bias_correction_kl)
    # None: the loss type's own aggregation; a name overrides it
    loss_agg: Literal[LOSS_AGGREGATIONS] | None = None
    scale_rewards: bool = True
    std_ddof: Literal[0, 1] = 0
    mask_zero_std: bool = False
    kl_estimator: Literal[KL_ESTIMATORS] = "k3"
    ref_refresh_every: int = Field(0, ge=0)
    update: Literal["adam", "trpo", "npg"] = "adam"  # rlax_trpo.lm.natural: trpo, npg
    cg_iters: int = Field(10, ge=1)
    line_search_steps: int = Field(10, ge=1)
    kl_control: Literal["fixed", "adaptive"] = "fixed"

    read_only_with = {
        **dict.fromkeys(ADAM_ONLY, read_with("update", "adam")),
        **dict.fromkeys(("cg_iters", *TRUST_REGION_HPARAMS), read_with("update", "trpo", "npg")),
        **dict.fromkeys(LINE_SEARCH, read_with("update", "trpo")),
        "hp.kl_target": read_with("kl_control", "adaptive"),
        "std_ddof": read_with("scale_rewards", True),  # the std that scales the rewards
        "hp.std_floor": read_with("scale_rewards", True),
        "hp.clip_delta": read_with("loss_type", *CLIP_LOSS_TYPES),
        **dict.fromkeys(SAPO_HPARAMS, read_with("loss_type", "sapo")),
        **dict.fromkeys(VESPO_HPARAMS, read_with("loss_type", "vespo")),
        **{name: read_with("loss_type", *types) for name, types in DPPO_HPARAMS.items()},
    }

    @model_validator(mode="after")
    def _minibatches_divide_the_batch(self):
        batch = self.num_prompts * self.group_size
        if batch % self.num_minibatches:
            raise ValueError(
                f"num_minibatches: {self.num_minibatches} must divide "
                f"num_prompts x group_size ({batch})"
            )
        return self

    def grpo_cfg(self) -> LMGRPOConfig:
        """The static settings `rlax_trpo.lm.grpo.make_grpo` reads: this section's fields, as
        validated, and the completion budget (`completion_len`)."""
        fields = {name: getattr(self, name) for name in GRPOLMFields.model_fields}
        return LMGRPOConfig(max_new_tokens=self.completion_len(), **fields)


SPEC = AlgorithmSpec(
    make=None,
    fields=GRPOLMFields,
    hparams=LMHParams,
    base=LMFields,
    program="rlax_trpo.lm.program:make_lm_program",
)
