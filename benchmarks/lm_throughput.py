"""GRPO tokens per second on a Qwen2.5-0.5B-shaped decoder with random weights: this library
beside TRL's GRPOTrainer (transformers generation, no vLLM), on one device, in one run.
The goal: at least 2x TRL's tokens per second on a GPU.

    python benchmarks/lm_throughput.py --json benchmarks/results/lm_throughput_h200.json
    python benchmarks/lm_throughput.py --tiny       # 2 layers, width 64: the CI smoke shape

One random `Qwen2ForCausalLM` (Qwen2.5-0.5B's config; `--layers`, `--hidden`, ... change it)
is saved to a temporary folder; TRL loads it with `from_pretrained`, this library with
`load_pretrained`, so both start from the same weights. Shape: N=`--prompts` prompts of
P=`--prompt-len` tokens, G=`--group` completions of exactly C=`--completion-len` tokens each
(no EOS ends one: ours is given an end id that never occurs, TRL `min_new_tokens=C`), at
temperature 1 without top-k/top-p. Both sides: LoRA rank 16 on the 7 projections (TRL through
peft; full fine-tuning on both with `--full`, or when peft is not installed), beta 0.04, the
"grpo" loss, one pass over the B=N*G sequences in M=`--minibatches` pieces (ours: M Adam
steps; TRL: M accumulated micro-batches, one AdamW step), no activation recomputation
unless `--remat` (TRL: activation checkpointing). bfloat16 compute on a GPU, float32 on a
CPU. On a GPU, TRL's model is loaded in bfloat16 (it samples outside autocast) and ours
keeps float32 master weights under full fine-tuning. TRL runs first and frees the GPU for JAX,
which does not preallocate.

What is timed (seconds per iteration, the mean of `--repeats` after `--warmup`):
  * ours, rollout: `jax.jit(grpo.collect)`: N prompts drawn, G completions each by the
    KV-cache sampler, rewards. Update: one jitted `make_batch` (pi_old and pi_ref log-probs,
    a full forward pass each) + `update`. Compile times are reported apart.
  * TRL, rollout: `GRPOTrainer._generate` (tokenise prompts, `model.generate`, decode),
    wrapped with a timer. Update: a whole optimizer step of `trainer.train()` (a callback's
    on_step_begin to on_step_end) minus its rollout: rewards, pi_ref log-probs, forward and
    backward over the micro-batches, clipping, AdamW. Its first steps are its warm-up. (TRL
    skips pi_old here, num_iterations=1: it reuses the detached log-probs of the loss.)
  * whole iteration: rollout + update, on each side.
Rollout tokens/s counts sampled completion tokens (B*C); update tokens/s the prompt and
completion tokens trained (B*(P+C)).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import jax.numpy as jnp
import numpy as np
from _publish import publish

from rlax_trpo.config import config_from_dict
from rlax_trpo.lm.grpo import make_grpo
from rlax_trpo.lm.hf.model import PROJECTIONS
from rlax_trpo.lm.hf.pretrained import load_pretrained
from rlax_trpo.lm.policy import decoder_policy, init_adapters
from rlax_trpo.lm.types import LMShared, LMTask, Prompts

QWEN = {"vocab": 151936, "hidden": 896, "intermediate": 4864, "layers": 24, "heads": 14,
        "kv_heads": 2, "head_dim": 64, "prompt_len": 256, "completion_len": 256,
        "prompts": 64, "group": 8, "minibatches": 8, "repeats": 3}  # fmt: skip
TINY = {"vocab": 1000, "hidden": 64, "intermediate": 128, "layers": 2, "heads": 2,
        "kv_heads": 1, "head_dim": 32, "prompt_len": 8, "completion_len": 8, "prompts": 2,
        "group": 2, "minibatches": 1, "repeats": 1}  # fmt: skip
LORA_ALPHA = 32.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the smoke shape (flags still win)")
    for name in QWEN:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"default {QWEN[name]}")
    parser.add_argument("--full", action="store_true", help="full fine-tuning on both sides")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--remat", action="store_true", help="recompute layers (TRL: checkpoint)")
    parser.add_argument("--chunk", type=int, default=64, help="our log-prob chunk (positions)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations per side")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    for name, value in (TINY if args.tiny else QWEN).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if (args.prompts * args.group) % args.minibatches:
        parser.error(f"--minibatches {args.minibatches} does not divide the batch")
    return args


def save_random_model(args, folder: str) -> None:
    """A random Qwen2 of the asked shape, in float32, as a Hugging Face folder."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
        max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=None, pad_token_id=args.vocab - 2,
        eos_token_id=args.vocab - 1,
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(folder)


def random_task(prompt_len: int, vocab: int) -> LMTask:
    """Prompts of exactly `prompt_len` random ids (no padding); the reward, a cheap hash of
    each completion's tokens, mod 2."""

    def sample(data, key, n):
        tokens = jax.random.randint(key, (n, prompt_len), 1, vocab - 2, jnp.int32)
        return Prompts(tokens, jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32))

    def reward(data, tokens, mask, target, hp):
        weights = jnp.arange(1, tokens.shape[1] + 1, dtype=jnp.uint32) * jnp.uint32(2654435761)
        r = (((tokens.astype(jnp.uint32) * weights).sum(1) >> 7) % 2).astype(jnp.float32)
        return r, r > 0

    return LMTask("random", prompt_len, sample, reward, lambda data, n: None)


def measure(fn, args: tuple, warmup: int, repeats: int):
    """(compile seconds, seconds a call after `warmup` calls, the output) of `jax.jit(fn)`."""
    start = time.perf_counter()
    exe = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - start
    for i in range(warmup + repeats):
        start = time.perf_counter() if i == warmup else start
        out = jax.block_until_ready(exe(*args))
    return compile_s, (time.perf_counter() - start) / repeats, out


def ours(args, folder: str, lora: bool, gpu: bool) -> dict:
    """This library's rollout and update seconds per iteration, and their compile times."""
    dtype = "bfloat16" if gpu else "float32"
    pretrained = load_pretrained(
        folder, dtype=dtype, param_dtype=dtype if lora else "float32",
        lora_rank=args.lora_rank if lora else 0, lora_alpha=LORA_ALPHA, remat=args.remat,
        tokenizer=False,
    )  # fmt: skip
    config = config_from_dict(
        {"algorithm": "grpo_lm", "task": "word_problems", "model_path": folder,
         "max_new_tokens": args.completion_len, "num_prompts": args.prompts,
         "group_size": args.group, "num_minibatches": args.minibatches}
    )  # fmt: skip
    gcfg, hp, cfg = config.grpo_cfg(), config.hp, pretrained.config
    length = args.prompt_len + args.completion_len
    policy = decoder_policy(cfg, (-1,), 0, length, args.chunk, frozen=lora)  # -1: never ends
    grpo = make_grpo(policy, random_task(args.prompt_len, args.vocab), gcfg)
    weights = jax.device_put(pretrained.params)
    if lora:
        params = jax.jit(init_adapters, static_argnums=0)(cfg, jax.random.key(0))
        shared = LMShared(weights)
    else:
        params, shared = weights, LMShared()
    ref_params = jax.tree.map(jnp.copy, params)
    opt_state = grpo.init(jax.random.key(1), params, hp).opt_state
    key = jax.random.key(2)

    def train_step(params, ref_params, opt_state, rollout, hp, key, shared):
        batch, _ = grpo.make_batch(params, ref_params, rollout, hp, shared)
        params, opt_state, metrics = grpo.update(params, opt_state, batch, hp, key, shared)
        return params, opt_state, metrics["loss/total"]

    times = args.warmup, args.repeats
    c_rollout, t_rollout, rollout = measure(grpo.collect, (params, key, hp, shared), *times)
    inputs = (params, ref_params, opt_state, rollout, hp, key, shared)
    c_update, t_update, _ = measure(train_step, inputs, *times)
    return {"rollout_s": t_rollout, "update_s": t_update,
            "sampled": int(rollout.completion.mask.sum()),
            "compile_s": {"collect": c_rollout, "make_batch_update": c_update}}  # fmt: skip


def word_tokenizer(vocab: int):
    """One word a token: `w0` .. `w{vocab-3}`, then `<pad>` and `<eos>` (what TRL needs)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab - 2)} | {"<pad>": vocab - 2, "<eos>": vocab - 1}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", padding_side="left"
    )


def trl_trainer(args, folder: str, lora: bool, gpu: bool, out: str, callback):
    """TRL's GRPOTrainer of the same model and shape, over N prompts of P words."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = word_tokenizer(args.vocab)
    rng = np.random.default_rng(0)
    words = rng.integers(0, args.vocab - 2, (args.prompts, args.prompt_len))
    prompts = [" ".join(f"w{i}" for i in row) for row in words]
    assert {len(ids) for ids in tokenizer(prompts)["input_ids"]} == {args.prompt_len}
    batch = args.prompts * args.group
    config = GRPOConfig(
        output_dir=out, per_device_train_batch_size=batch // args.minibatches,
        gradient_accumulation_steps=args.minibatches, num_generations=args.group,
        max_completion_length=args.completion_len, beta=0.04, num_iterations=1,
        loss_type="grpo", epsilon=0.2, epsilon_high=0.28, temperature=1.0,
        generation_kwargs={"min_new_tokens": args.completion_len},
        mask_truncated_completions=False, max_steps=args.warmup + args.repeats,
        logging_steps=10**9, save_strategy="no", report_to="none", disable_tqdm=True,
        bf16=gpu, use_cpu=not gpu, activation_checkpointing=args.remat, seed=0,
    )  # fmt: skip
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0,
            target_modules=list(PROJECTIONS), task_type="CAUSAL_LM",
        )  # fmt: skip
    dtype = torch.bfloat16 if gpu else torch.float32  # it samples outside autocast
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    rewards = lambda completions, **kw: rng.random(len(completions)).tolist()
    return GRPOTrainer(
        model, reward_funcs=rewards, args=config, processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": prompts}), peft_config=peft_config,
        callbacks=[callback],
    )  # fmt: skip


def trl(args, folder: str, lora: bool, gpu: bool) -> dict:
    """TRL's rollout and update seconds per step (module docstring)."""
    import torch
    from transformers import PrinterCallback, TrainerCallback

    sync = torch.cuda.synchronize if gpu else (lambda: None)

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.steps = []

        def on_step_begin(self, *_, **__):
            sync()
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            sync()
            self.steps.append(time.perf_counter() - self.start)

    timer, rollouts = StepTimer(), []
    with tempfile.TemporaryDirectory(prefix="lm-throughput-trl-") as out:
        start = time.perf_counter()
        trainer = trl_trainer(args, folder, lora, gpu, out, timer)
        setup_s = time.perf_counter() - start
        generate = trainer._generate

        def timed_generate(prompts):
            sync()
            start = time.perf_counter()
            result = generate(prompts)
            sync()
            rollouts.append((time.perf_counter() - start, sum(map(len, result[1]))))
            return result

        trainer._generate = timed_generate
        trainer.remove_callback(PrinterCallback)  # its end-of-training summary
        trainer.train()
    del trainer
    gc.collect()
    if gpu:
        torch.cuda.empty_cache()
    assert len(timer.steps) == len(rollouts) == args.warmup + args.repeats, (timer, rollouts)
    steps, rolls = timer.steps[args.warmup :], rollouts[args.warmup :]
    t_rollout = sum(t for t, _ in rolls) / len(rolls)
    return {"rollout_s": t_rollout, "update_s": sum(steps) / len(steps) - t_rollout,
            "sampled": rolls[-1][1], "setup_s": setup_s,
            "warmup_step_s": timer.steps[: args.warmup]}  # fmt: skip


def report(args, side: dict) -> dict:
    batch = args.prompts * args.group
    expected = batch * args.completion_len
    assert side["sampled"] == expected, f"{side['sampled']} tokens sampled, not {expected}"
    iteration = side["rollout_s"] + side["update_s"]
    return {
        "rollout_tokens_per_s": expected / side["rollout_s"],
        "update_tokens_per_s": batch * (args.prompt_len + args.completion_len) / side["update_s"],
        "iteration_s": iteration,
        **{k: v for k, v in side.items() if k != "sampled"},
    }


def main():
    args = parse_args()
    import torch

    gpu = torch.cuda.is_available()
    peft = importlib.util.find_spec("peft") is not None
    lora = not args.full and peft
    mode = f"LoRA rank {args.lora_rank}, 7 projections" if lora else "full fine-tuning"
    if not args.full and not peft:
        mode += " (peft is not installed: TRL's LoRA needs it)"
    devices = {"jax": jax.devices()[0].device_kind,
               "torch": torch.cuda.get_device_name(0) if gpu else "cpu"}  # fmt: skip
    shape = {k: getattr(args, k) for k in QWEN if k != "repeats"}
    print(f"devices {devices}; {mode}; shape {shape}")
    with tempfile.TemporaryDirectory(prefix="lm-throughput-model-") as folder:
        save_random_model(args, folder)
        theirs = report(args, trl(args, folder, lora, gpu))
        mine = report(args, ours(args, folder, lora, gpu))
    ratio = {
        "rollout_tokens_per_s": mine["rollout_tokens_per_s"] / theirs["rollout_tokens_per_s"],
        "update_tokens_per_s": mine["update_tokens_per_s"] / theirs["update_tokens_per_s"],
        "iterations_per_s": theirs["iteration_s"] / mine["iteration_s"],
    }
    for name, side in (("ours", mine), ("TRL", theirs)):
        print(f"{name:4s}: rollout {side['rollout_tokens_per_s']:12,.0f} sampled tokens/s, "
              f"update {side['update_tokens_per_s']:12,.0f} trained tokens/s, "
              f"iteration {side['iteration_s']:.3f} s")  # fmt: skip
    print("ours/TRL: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))
    dtype = "bfloat16" if gpu else "float32"
    figures = {"devices": devices, "mode": mode, "dtype": dtype, "shape": shape,
               "warmup": args.warmup, "repeats": args.repeats, "remat": args.remat,
               "ours": mine, "trl": theirs, "ours_over_trl": ratio}  # fmt: skip
    publish("lm_throughput", figures, args.json)


if __name__ == "__main__":
    main()
