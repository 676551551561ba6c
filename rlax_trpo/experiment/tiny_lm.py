"""`rlax-trpo tiny-lm --out DIR`: a small pretrained model in the Hugging Face layout, made
here, for the CPU configurations and the tests of the pretrained-model path.

No pretrained weights can be downloaded on every machine, so this writes one:

    1. a byte-level BPE tokenizer trained with `tokenizers` on generated word problems
       (digits one a token, as Qwen's; ChatML's special tokens), saved as tokenizer.json;
    2. a Qwen2-layout decoder (q/k/v biases, grouped-query attention, tied embeddings),
       randomly initialised;
    3. supervised steps on the problems' worked solutions (teacher forcing);
    4. `save_pretrained`: config.json, model.safetensors, generation_config.json and the
       tokenizer files, a folder transformers loads as `Qwen2ForCausalLM`, and `tiny_lm.json`
       saying how it was made.

The folder then goes through `load_pretrained` like any downloaded checkpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from rlax_trpo.errors import ConfigError
from rlax_trpo.lm import bank, word_problems
from rlax_trpo.lm.config import INSTRUCTION
from rlax_trpo.lm.hf.checkpoint import save_pretrained
from rlax_trpo.lm.hf.config import DecoderConfig
from rlax_trpo.lm.hf.model import init_decoder
from rlax_trpo.lm.hf.tokenizer import TextTokenizer
from rlax_trpo.lm.policy import decoder_policy
from rlax_trpo.lm.sft import supervised_steps

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MADE = "tiny_lm.json"  # what made the folder (transformers and the loader ignore it)
# Qwen2's pre-tokenizer pattern: words, single digits, punctuation runs, whitespace
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE `tokenizers.Tokenizer` with Qwen2's pre-tokenizer and ChatML's
    special tokens (ids 0, 1, 2), trained on `texts`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def tiny_config(vocab_size: int, width: int, layers: int) -> DecoderConfig:
    """A Qwen2-layout decoder of `layers` layers of `width` (heads of 32, half as many KV
    heads: grouped-query attention), tied embeddings, float32."""
    heads = max(2, width // 32)
    return DecoderConfig(
        family="qwen2",
        vocab_size=vocab_size,
        hidden_size=width,
        intermediate_size=4 * width,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads // 2,
        head_dim=width // heads,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        qkv_bias=True,
        tie_word_embeddings=True,
        max_position_embeddings=512,
    )


def _tokenizer_files(tok, folder: Path) -> None:
    """tokenizer.json, tokenizer_config.json and generation_config.json in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    ids = {name: tok.token_to_id(name) for name in SPECIALS}
    config = {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHATML,
        "model_max_length": 512,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    generation = {
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))


def make_tiny_lm(
    out: str | Path,
    steps: int = 1500,
    seed: int = 0,
    width: int = 128,
    layers: int = 4,
    vocab_size: int = 2048,
    batch: int = 32,
    learning_rate: float = 2e-3,
    num_problems: int = 20000,
    max_new_tokens: int = 48,
    chat_template: str = "none",
    instruction: str = "",
    kinds: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Write the folder (module docstring); returns what was done: sizes, the supervised
    loss at its start and end, seconds."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out: {str(out)!r} exists and is not an empty directory")
    t0 = time.perf_counter()
    kinds = word_problems.DEFAULT_KINDS if kinds is None else kinds
    problems, _ = bank.split(word_problems.generate_problems(num_problems, seed, kinds))
    texts = [f"{p.question}\n{INSTRUCTION}\n{p.solution}" for p in problems]
    tok = train_tokenizer(texts, vocab_size)
    _tokenizer_files(tok, out)
    ids = {name: tok.token_to_id(name) for name in SPECIALS}
    text = TextTokenizer(tok, [ids["<|im_end|>"]], ids["<|endoftext|>"], chat_template)
    cfg = tiny_config(tok.get_vocab_size(), width, layers)
    rows = bank.prompt_bank(text, problems, instruction, None)
    rows["solution"], rows["solution_mask"] = bank.solutions(text, problems, max_new_tokens)
    policy = decoder_policy(cfg, text.eos_ids, text.pad_id, cfg.max_position_embeddings)
    key, k_init = jax.random.split(jax.random.key(seed))
    train = jax.jit(lambda p, r, k: supervised_steps(policy, p, r, k, learning_rate, steps, batch))
    params = jax.jit(lambda k: init_decoder(cfg, k))(k_init)
    losses = None
    if steps > 0:
        params, losses = train(params, rows, key)
        losses = np.asarray(losses)
    save_pretrained(jax.device_get(params), cfg, out)  # beside the tokenizer's files
    made = {
        "folder": str(out),
        "parameters": int(sum(np.size(x) for x in jax.tree.leaves(params))),
        "vocab_size": cfg.vocab_size,
        "supervised_steps": steps,
        "loss_first": None if losses is None else float(losses[:10].mean()),
        "loss_last": None if losses is None else float(losses[-10:].mean()),
        "seconds": time.perf_counter() - t0,
        "settings": {
            "seed": seed,
            "width": width,
            "layers": layers,
            "batch": batch,
            "learning_rate": learning_rate,
            "num_problems": num_problems,
            "kinds": list(kinds),
        },
    }
    (out / MADE).write_text(json.dumps(made, indent=2))
    return made
