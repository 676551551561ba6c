"""Configuration of a GRPO language-model run (`algorithm: grpo_lm`), validated by pydantic.

Host-side only. `validate(raw)` turns a raw dict (the YAML with CLI overrides merged) into a
frozen `LMConfig` or raises `ConfigError` with a one-line message naming the key.
"""

from __future__ import annotations

import pathlib
from typing import Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_trpo.config import hparams_model
from rlax_trpo.errors import ConfigError
from rlax_trpo.lm.grpo import GRPOConfig, HParams
from rlax_trpo.lm.model import ModelConfig
from rlax_trpo.lm.tasks import VOCAB_SIZE, Task, make_task

DEFAULT_DIGITS = {"max_digit": 5, "sort": 4, "add": 3}

_STRICT = ConfigDict(extra="forbid", frozen=True)


class ModelSection(BaseModel):
    model_config = _STRICT
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


HPSection = hparams_model(HParams, "HPSection")  # validates `hp:` against `HParams`


class LMConfig(BaseModel):
    """A whole `grpo_lm` run: task, model, GRPO settings, warm start, evaluation, `hp`."""

    model_config = _STRICT
    algorithm: Literal["grpo_lm"]
    task: Literal["max_digit", "sort", "add"]
    num_digits: int | None = Field(None, ge=1, le=9)
    reverse_answer: bool = True
    max_new_tokens: int | None = Field(None, ge=1)
    model: ModelSection = ModelSection()
    num_prompts: int = Field(32, ge=1)
    group_size: int = Field(16, ge=2)
    num_iterations: int = Field(300, ge=1)
    num_epochs: int = Field(1, ge=1)
    num_minibatches: int = Field(1, ge=1)
    loss_agg: Literal["seq_mean_token_mean", "token_mean", "constant"] = "seq_mean_token_mean"
    scale_rewards: bool = True
    std_ddof: Literal[0, 1] = 0
    mask_zero_std: bool = False
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    ref_refresh_every: int = Field(0, ge=0)
    warm_start_steps: int = Field(0, ge=0)
    warm_start_batch_size: int = Field(64, ge=1)
    eval_size: int = Field(1000, ge=1)
    eval_every: int = Field(25, ge=1)
    seed: int = 0
    hp: HPSection = HPSection()

    @model_validator(mode="after")
    def _consistent(self):
        batch = self.num_prompts * self.group_size
        if batch % self.num_minibatches:
            raise ValueError(
                f"num_minibatches ({self.num_minibatches}) must divide "
                f"num_prompts*group_size ({batch})"
            )
        task = self.make_task()
        if self.max_new_tokens is not None and self.max_new_tokens < task.answer_len + 1:
            raise ValueError(
                f"max_new_tokens must be >= {task.answer_len + 1} for task {self.task} "
                f"(answer and EOS)"
            )
        return self

    def to_dict(self) -> dict:
        """Plain YAML-able dict (what `config.yaml` holds)."""
        return self.model_dump()

    # ---- builders (host side)
    def make_task(self) -> Task:
        digits = self.num_digits or DEFAULT_DIGITS[self.task]
        return make_task(self.task, digits, self.reverse_answer)

    def completion_len(self) -> int:
        return self.max_new_tokens or self.make_task().answer_len + 1

    def model_cfg(self) -> ModelConfig:
        task = self.make_task()
        return ModelConfig(
            vocab_size=VOCAB_SIZE,
            max_len=task.prompt_len + self.completion_len(),
            **self.model.model_dump(),
        )

    def grpo_cfg(self) -> GRPOConfig:
        return GRPOConfig(
            num_prompts=self.num_prompts,
            group_size=self.group_size,
            max_new_tokens=self.completion_len(),
            num_epochs=self.num_epochs,
            num_minibatches=self.num_minibatches,
            loss_agg=self.loss_agg,
            scale_rewards=self.scale_rewards,
            std_ddof=self.std_ddof,
            mask_zero_std=self.mask_zero_std,
            kl_estimator=self.kl_estimator,
            ref_refresh_every=self.ref_refresh_every,
        )

    def hparams(self) -> HParams:
        return HParams(**self.hp.model_dump())


def _one_line(err: pydantic.ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "config"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return f"{loc}: unknown key (not allowed for algorithm grpo_lm)"
    got = first.get("input")
    if isinstance(got, (dict, list)) or first["type"] == "missing":
        return f"{loc}: {msg}"
    return f"{loc}: {msg} (got {got!r})"


def validate(raw: dict) -> LMConfig:
    """Validate a raw config dict; raise `ConfigError` (one line) when it is not valid."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a mapping, got {type(raw).__name__}")
    try:
        return LMConfig.model_validate(raw)
    except pydantic.ValidationError as err:
        raise ConfigError(_one_line(err)) from None


def apply_overrides(raw: dict, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Return a copy of `raw` with `key.sub=value` strings applied (values parsed as YAML)."""
    out = yaml.safe_load(yaml.safe_dump(raw))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value")
        key, value = item.split("=", 1)
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key}: {p} is not a section")
        node[leaf] = yaml.safe_load(value)
    return out


def load_config(path: str | pathlib.Path, overrides: list[str] | tuple[str, ...] = ()) -> LMConfig:
    """Read a YAML config, apply `key=value` overrides, validate."""
    raw = yaml.safe_load(pathlib.Path(path).read_text())
    return validate(apply_overrides(raw, overrides))
