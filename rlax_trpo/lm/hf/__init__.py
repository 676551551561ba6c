"""Hugging Face decoders: Qwen2 / Qwen2.5, Qwen3 and Llama 3.x checkpoints from their folders.

`load_pretrained(folder)` reads `config.json`, the safetensors files, `generation_config.json`
and `tokenizer.json` (`pretrained`); `DecoderLM` is the model (`model`), `DecoderConfig` its
shape (`config`); `save_pretrained` writes a trained policy back as a folder transformers
loads (`checkpoint`); `load_tokenizer` gives the folder's tokenizer and chat prompts
(`tokenizer`). transformers is never needed at run time.
"""

from rlax_trpo.lm.hf.config import CheckpointError, DecoderConfig
from rlax_trpo.lm.hf.model import DecoderLM, init_decoder, init_decoder_cache
from rlax_trpo.lm.hf.pretrained import Pretrained, load_pretrained, save_pretrained
from rlax_trpo.lm.hf.tokenizer import TextTokenizer, load_tokenizer

__all__ = [
    "CheckpointError",
    "DecoderConfig",
    "DecoderLM",
    "Pretrained",
    "TextTokenizer",
    "init_decoder",
    "init_decoder_cache",
    "load_pretrained",
    "load_tokenizer",
    "save_pretrained",
]
