"""`load_pretrained(folder)`: a Hugging Face checkpoint folder as this library's model, its
parameters and its tokenizer, in one call.

    pretrained = load_pretrained("Qwen2.5-0.5B-Instruct", dtype="bfloat16", lora_rank=16)
    logits, _ = DecoderLM(pretrained.config).apply(pretrained.params, ids)

It reads `config.json` (transformers v4 or v5), the single or sharded `*.safetensors`,
`generation_config.json` and `tokenizer.json` (with `tokenizer_config.json`); every problem
is one `CheckpointError` line naming the file and the tensor or setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax

from rlax_trpo.lm.hf.checkpoint import load_params, read_decoder_config, save_pretrained
from rlax_trpo.lm.hf.config import CheckpointError, DecoderConfig
from rlax_trpo.lm.hf.model import PROJECTIONS, init_decoder
from rlax_trpo.lm.hf.tokenizer import TextTokenizer, load_tokenizer

__all__ = ["Pretrained", "load_pretrained", "save_pretrained"]


class Pretrained(NamedTuple):
    """A loaded checkpoint: the model's config, its parameters (host numpy arrays in
    `config.param_dtype`, a Linen variable tree without LoRA adapters: a run initialises those
    per member, `rlax_trpo.lm.policy.init_adapters`) and its tokenizer (None when
    `tokenizer=False`)."""

    config: DecoderConfig
    params: dict[str, Any]
    tokenizer: TextTokenizer | None
    folder: Path


def load_pretrained(
    folder: str | Path,
    dtype: str = "float32",
    param_dtype: str | None = None,
    lora_rank: int = 0,
    lora_alpha: float = 32.0,
    lora_targets: tuple[str, ...] = PROJECTIONS,
    remat: bool = False,
    chat_template: str = "auto",
    system_prompt: str | None = None,
    tokenizer: bool = True,
) -> Pretrained:
    """Load a checkpoint folder (module docstring).

    Args:
      dtype: the compute dtype; param_dtype: the parameters' (default: `dtype`).
      lora_rank, lora_alpha, lora_targets: adapters on these projections (rank 0: none).
      remat: recompute each layer in the backward pass.
      chat_template, system_prompt: how prompts are rendered (`load_tokenizer`).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"model_path: {folder} is not a folder")
    unknown = sorted(set(lora_targets) - set(PROJECTIONS))
    if unknown:
        raise CheckpointError(
            f"lora.targets: {unknown[0]!r} is not one of {', '.join(PROJECTIONS)}"
        )
    cfg = read_decoder_config(
        folder,
        dtype=dtype,
        param_dtype=param_dtype or dtype,
        lora_rank=lora_rank,
        lora_alpha=lora_alpha,
        lora_targets=tuple(lora_targets) if lora_rank else (),
        remat=remat,
    )
    template = jax.eval_shape(lambda: init_decoder(cfg, jax.random.key(0)))
    params = load_params(folder, cfg, template)
    text = load_tokenizer(folder, chat_template, system_prompt) if tokenizer else None
    if text is not None and text.vocab_size > cfg.vocab_size:
        raise CheckpointError(
            f"{folder / 'tokenizer.json'}: {text.vocab_size} tokens, more than the model's "
            f"vocab_size {cfg.vocab_size}"
        )
    return Pretrained(cfg, params, text, folder)
