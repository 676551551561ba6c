"""A `grpo_lm` run of a pretrained Hugging Face checkpoint (`model_path`) as a `Program`.

    load_pretrained(model_path)  config.json, safetensors, tokenizer.json (host, once)
    word problems or a JSONL file -> a bank of prompt ids and the digit table (host, once)
    init(key, hp, shared)   LoRA adapters from the member's key (or, under full fine-tuning,
                            a copy of the weights) -> greedy held-out accuracy -> GRPO state
    run(state, hp, n, shared)  n GRPO iterations in one `lax.scan`
    evaluate(state, key, shared)  greedy exact-match accuracy on the held-out prompts

`shared` (`Program.shared`, an `LMShared`) holds the checkpoint's weights and the task's arrays:
one copy for the whole population, passed to the compiled program, never closed over as
constants and never part of the checkpointed state (a resumed run loads them from
`model_path` again). With LoRA the reference policy is the frozen model with the adapters
at their start (zero: the model itself), so no second copy of the weights exists.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rlax_trpo.config.configuration import Config
from rlax_trpo.errors import ConfigError
from rlax_trpo.lm import bank, word_problems
from rlax_trpo.lm.grpo import make_grpo
from rlax_trpo.lm.hf.pretrained import Pretrained, load_pretrained
from rlax_trpo.lm.policy import decoder_policy, init_adapters
from rlax_trpo.lm.run_program import LMTrainState, lm_program
from rlax_trpo.lm.types import LMShared, LMTask, Prompts
from rlax_trpo.types import Program


def load_model(cfg: Config) -> Pretrained:
    """The checkpoint of `cfg.model_path`, with the run's dtype, adapters and chat prompts.
    Under full fine-tuning (`lora: null`) the parameters are float32 whatever `dtype`."""
    lora = cfg.lora
    return load_pretrained(
        cfg.model_path,
        dtype=cfg.dtype,
        param_dtype=cfg.dtype if lora is not None else "float32",
        lora_rank=lora.rank if lora is not None else 0,
        lora_alpha=lora.alpha if lora is not None else 16.0,
        lora_targets=lora.targets if lora is not None else (),
        remat=cfg.remat,
        chat_template=cfg.chat_template,
        system_prompt=cfg.system_prompt,
    )


def make_text_task(cfg: Config, pretrained: Pretrained) -> LMTask:
    """Word problems (generated from `cfg.seed`) or a JSONL file's rows, as a bank."""
    if cfg.task == "jsonl":
        rows = word_problems.read_jsonl(cfg.data_path)
        if cfg.eval_path is not None:
            train, held = rows, word_problems.read_jsonl(cfg.eval_path)
        else:
            train, held = bank.split(rows)
    else:
        problems = word_problems.generate_problems(cfg.num_problems, cfg.seed, cfg.problem_kinds)
        train, held = bank.split(problems)
    if len(held) < cfg.eval_size:
        raise ConfigError(
            f"eval_size: {cfg.eval_size} held-out problems asked for, {len(held)} there "
            f"({'num_problems' if cfg.task == 'word_problems' else 'eval_path'} gives more)"
        )
    return bank.word_problem_task(
        cfg.task,
        pretrained.tokenizer,
        train,
        held[: cfg.eval_size],
        pretrained.config.vocab_size,
        cfg.rewards,
        cfg.instruction,
        cfg.max_prompt_len,
    )


def make_pretrained_program(cfg: Config, progress: Any = None) -> Program:
    """The `Program` of a pretrained model's `grpo_lm` configuration (host side)."""
    pretrained = load_model(cfg)
    model, tokenizer = pretrained.config, pretrained.tokenizer
    task = make_text_task(cfg, pretrained)
    length = task.prompt_len + cfg.max_new_tokens
    if length > model.max_position_embeddings:
        raise ConfigError(
            f"max_new_tokens: prompts of {task.prompt_len} tokens and {cfg.max_new_tokens} new "
            f"ones exceed the model's {model.max_position_embeddings} positions"
        )
    lora = cfg.lora is not None
    policy = decoder_policy(
        model, tokenizer.eos_ids, tokenizer.pad_id, length, cfg.logprob_chunk, frozen=lora
    )
    grpo = make_grpo(policy, task, cfg.grpo_cfg())
    shared = LMShared(pretrained.params, task.data)
    eval_key = jax.random.key(0)  # unused by greedy decoding

    def held_out(shared: LMShared) -> Prompts:
        rows = jax.tree.map(lambda x: x[: cfg.eval_size], shared.data["eval"])
        return Prompts(rows["tokens"], rows["pad"], rows["answer"])

    def accuracy(params, shared: LMShared) -> jax.Array:
        return grpo.evaluate(params, held_out(shared), eval_key, shared)["accuracy"]

    def init(key: jax.Array, hp, shared: LMShared) -> LMTrainState:
        k_lora, k_grpo = jax.random.split(key)
        params = init_adapters(model, k_lora) if lora else shared.weights
        state = grpo.init(k_grpo, params, hp)
        return LMTrainState(state, accuracy(params, shared), jnp.full((), jnp.nan))

    return lm_program(cfg, grpo, init, accuracy, progress, shared)
