"""A checkpoint folder's tokenizer: `tokenizer.json` through the `tokenizers` library
(transformers is never needed), its end-of-sequence and padding ids, and chat prompts.

The ids come from `generation_config.json` (instruct models list several end ids: Qwen2.5's
`<|im_end|>` and `<|endoftext|>`) and `tokenizer_config.json`. Chat prompts are rendered
without jinja, for the two templates of the families here: Qwen's ChatML

    <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n

(with Qwen2.5's default system prompt where its template has one) and Llama 3's header
format; "auto" picks the one the folder's chat template uses, "none" gives the text as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlax_trpo.lm.hf.checkpoint import read_json
from rlax_trpo.lm.hf.config import CheckpointError

TEMPLATES = ("auto", "chatml", "llama3", "none")
QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise CheckpointError(
            "reading a tokenizer.json needs the tokenizers package: pip install 'rlax_trpo[lm]'"
        ) from None
    return tokenizers


class TextTokenizer:
    """Encode, decode and render prompts with a folder's tokenizer.

    Attributes:
      tokenizer: the `tokenizers.Tokenizer`.
      eos_ids: the ids that end a completion.
      pad_id: the id of padding.
      template: "chatml", "llama3" or "none".
      system_prompt: the system message of chat prompts, or None.
    """

    def __init__(self, tokenizer, eos_ids, pad_id, template="none", system_prompt=None):
        self.tokenizer = tokenizer
        self.eos_ids = tuple(int(i) for i in eos_ids)
        self.pad_id = int(pad_id)
        self.template = template
        self.system_prompt = system_prompt

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """The ids of `text`; special tokens written in it are taken as themselves."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        """The text of `ids`, special tokens left out."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def render(self, text: str) -> str:
        """`text` as the user's turn of a chat prompt that the assistant answers next."""
        system = self.system_prompt
        if self.template == "chatml":
            head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
            return f"{head}<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        if self.template == "llama3":
            header = lambda role: f"<|start_header_id|>{role}<|end_header_id|>\n\n"
            head = f"{header('system')}{system}<|eot_id|>" if system else ""
            return f"<|begin_of_text|>{head}{header('user')}{text}<|eot_id|>{header('assistant')}"
        return text

    def prompt_ids(self, text: str) -> list[int]:
        return self.encode(self.render(text))

    def token_texts(self, size: int | None = None) -> list[str]:
        """Each id's text as it decodes inside a sequence (after an anchor token, less the
        anchor's text); ids past the tokenizer's vocabulary (a model's padded embedding) and
        special tokens decode to ''. `size`: the number of ids (the model's vocabulary)."""
        size = self.vocab_size if size is None else size
        anchor = self.encode("a")[:1]
        base = self.decode(anchor)
        known = min(size, self.vocab_size)
        texts = self.tokenizer.decode_batch([[*anchor, i] for i in range(known)])
        return [t[len(base) :] for t in texts] + [""] * (size - known)


def _id_of(tokenizer, token: Any) -> int | None:
    if isinstance(token, dict):  # {"content": "<|im_end|>", ...}
        token = token.get("content")
    return tokenizer.token_to_id(token) if isinstance(token, str) else None


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def _template(chosen: str, chat_template: Any, tokenizer) -> str:
    if chosen != "auto":
        return chosen
    text = chat_template if isinstance(chat_template, str) else ""
    if "<|im_start|>" in text or (not text and tokenizer.token_to_id("<|im_start|>") is not None):
        return "chatml"
    if "<|start_header_id|>" in text:
        return "llama3"
    return "none"


def load_tokenizer(
    folder: str | Path, template: str = "auto", system_prompt: str | None = None
) -> TextTokenizer:
    """The tokenizer of a checkpoint folder (`tokenizer.json`, with `tokenizer_config.json`
    and `generation_config.json` where they are there)."""
    folder = Path(folder)
    if template not in TEMPLATES:
        raise CheckpointError(f"chat_template: {template!r} is not one of {', '.join(TEMPLATES)}")
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file (the model's tokenizer)")
    try:
        tokenizer = _tokenizers().Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception for a malformed file
        raise CheckpointError(f"{path}: cannot be read as a tokenizer ({err})") from None
    config = _optional_json(folder / "tokenizer_config.json")
    generation = _optional_json(folder / "generation_config.json")
    eos = _ids(generation.get("eos_token_id"))
    named = _id_of(tokenizer, config.get("eos_token"))
    eos += [named] if named is not None and named not in eos else []
    if not eos:
        files = "generation_config.json or tokenizer_config.json"
        raise CheckpointError(f"{folder}: no end-of-sequence id in {files}")
    pad = _ids(generation.get("pad_token_id")) or [_id_of(tokenizer, config.get("pad_token"))]
    pad_id = pad[0] if pad[0] is not None else eos[0]
    chat = config.get("chat_template")
    kind = _template(template, chat, tokenizer)
    if system_prompt is None and isinstance(chat, str) and QWEN25_SYSTEM in chat:
        system_prompt = QWEN25_SYSTEM  # what Qwen2.5's own template writes when none is given
    return TextTokenizer(tokenizer, eos, pad_id, kind, system_prompt)


def _optional_json(path: Path) -> dict[str, Any]:
    return read_json(path) if path.is_file() else {}
