"""Word problems, their bank of prompt ids, the folder's tokenizer, and the answer read from
token ids inside the graph, held to a regular-expression parser of the decoded text.

The real vocabularies (Qwen's, a Llama 3-style and GPT-2's) are in tests/test_lm_hf_compare.py;
here, byte-level BPEs trained on the spot with Qwen2's pre-tokenizer (a digit a token) and with
GPT-2's (numbers merged with a leading space)."""

from __future__ import annotations

import json
import random
import re

import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.errors import ConfigError
from rlax_trpo.lm import answers, bank, word_problems
from rlax_trpo.lm.hf.config import CheckpointError
from rlax_trpo.lm.hf.tokenizer import TextTokenizer, load_tokenizer

pytest.importorskip("tokenizers")

STEP = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)\.")


def test_every_generated_solution_is_right_and_ends_in_its_answer():
    problems = word_problems.generate_problems(3000, 11)
    assert problems == word_problems.generate_problems(3000, 11)  # seeded
    assert problems != word_problems.generate_problems(3000, 12)
    ops = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}
    for p in problems:
        steps = STEP.findall(p.solution)
        assert 1 <= len(steps) <= 3, p
        for a, op, b, r in steps:
            assert ops[op](int(a), int(b)) == int(r), p
            assert op != "/" or int(a) % int(b) == 0, p
        assert p.solution.endswith(f"#### {p.answer}") and int(steps[-1][3]) == p.answer >= 0
    only = word_problems.generate_problems(50, 0, ("distance",))
    assert all("miles" in p.question for p in only)


def test_a_jsonl_file_of_rows_and_its_errors(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "2 + 3?", "answer": 5}\n\n{"prompt": "x", "answer": "17"}\n')
    rows = word_problems.read_jsonl(path)
    assert [(r.question, r.answer) for r in rows] == [("2 + 3?", 5), ("x", 17)]
    for text, message in [
        ("{not json", "line 1: not JSON"),
        ('{"answer": 3}', "line 1: needs a string 'prompt'"),
        ('{"prompt": "a", "answer": -1}', "line 1: 'answer' must be an integer"),
        ('{"prompt": "a", "answer": true}', "line 1: 'answer' must be an integer"),
        ("", "holds no rows"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            word_problems.read_jsonl(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        word_problems.read_jsonl(tmp_path / "missing.jsonl")


# ----------------------------------------------------------------------------- the parser


def _parse(texts: list[str], ids: list[list[int]], ended: list[bool]) -> answers.Parsed:
    table = jnp.asarray(answers.build_table(texts))
    width = max(len(r) for r in ids)
    tokens = np.zeros((len(ids), width), np.int32)
    mask = np.zeros((len(ids), width), np.float32)
    for b, row in enumerate(ids):
        tokens[b, : len(row)], mask[b, : len(row)] = row, 1
    return answers.parse_completions(
        table, jnp.asarray(tokens), jnp.asarray(mask), jnp.array(ended)
    )


def test_the_parser_on_tokens_worked_out_by_hand():
    # ids: 0 '' (a special token), 1 '1', 2 '23', 3 ' 4', 4 '#', 5 ' ####', 6 '.', 7 'x',
    # 8 'a1b', 9 '5!', 10 ' ', 11 '1234567890'
    texts = ["", "1", "23", " 4", "#", " ####", ".", "x", "a1b", "5!", " ", "1234567890"]
    cases = [  # ids, ended -> value or None, format
        ([1, 2], True, 123, False),  # digits of two tokens join: no '#' before
        ([1, 0, 2], True, 123, False),  # a special token between them decodes to nothing
        ([1, 3], True, 4, False),  # a space starts a new number
        ([5, 3, 6], True, 4, True),  # "#### 4." ends as GSM8K's answers do
        ([5, 3, 6], False, 4, False),  # ... but not when cut at the budget
        ([5, 3, 7], True, 4, False),  # a letter after the answer
        ([4, 2, 10, 6, 0], True, 23, True),  # "#23 ." then a special token
        ([7, 8], True, 1, False),  # inside a token: "xa1b"
        ([4, 9], True, 5, True),  # "#5!"
        ([7, 6], True, None, False),  # no digit at all
        ([4, 11], True, None, False),  # ten digits: no answer
    ]
    parsed = _parse(texts, [c[0] for c in cases], [c[1] for c in cases])
    for b, (ids, ended, value, fmt) in enumerate(cases):
        text = "".join(texts[i] for i in ids)
        assert answers.parse_text(text, ended) == (value, fmt), (text, ended)
        assert bool(parsed.valid[b]) == (value is not None), text
        assert int(parsed.value[b]) == (value or 0) and bool(parsed.format[b]) == fmt, text


def _gpt2_style(problems) -> TextTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's regex
    tok.decoder = decoders.ByteLevel()
    r = random.Random(0)
    texts = [
        f"{p.question} {p.solution} {r.randint(0, 10**6)} #{r.randint(0, 99)}" for p in problems
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return TextTokenizer(tok, [1, 0], 0)


def _random_rows(tok: TextTokenizer, rows: int, width: int, seed: int):
    r = random.Random(seed)
    texts = tok.token_texts()
    with_digits = [i for i, t in enumerate(texts) if any(c.isdigit() for c in t)]
    ids, ended = [], []
    for _ in range(rows):
        if r.random() < 0.5:
            number = r.randint(0, 10 ** r.randint(1, 11))
            tail = r.choice(["", ".", " ", "!", " x", "#"])
            row = tok.encode(f"{r.choice(['a', '3 = 4.', ''])} #### {number}{tail}")
        else:
            pick = lambda: r.choice(with_digits) if r.random() < 0.5 else r.randrange(len(texts))
            row = [pick() for _ in range(r.randint(1, width - 1))]
        row = row[-(width - 1) :]
        end = r.random() < 0.7
        ids.append([*row, tok.eos_ids[0]] if end else row)
        ended.append(end)
    return ids, ended


def test_the_parser_agrees_with_the_text_parser_on_random_completions(tiny_lm_folder):
    problems = word_problems.generate_problems(1500, 2)
    for tok in (load_tokenizer(tiny_lm_folder), _gpt2_style(problems)):
        ids, ended = _random_rows(tok, 3000, 16, seed=3)
        parsed = _parse(tok.token_texts(), ids, ended)
        formats = 0
        for b, (row, end) in enumerate(zip(ids, ended, strict=True)):
            value, fmt = answers.parse_text(tok.decode(row), end)
            assert bool(parsed.valid[b]) == (value is not None), tok.decode(row)
            assert int(parsed.value[b]) == (value or 0), tok.decode(row)
            assert bool(parsed.format[b]) == fmt, tok.decode(row)
            formats += fmt
        assert formats > 300


def test_digits_reward_counts_digits_in_place():
    parsed = answers.Parsed(
        jnp.array([12, 20, 21, 5, 0, 123, 7, 1020]),
        jnp.array([True] * 6 + [False, True]),
        None,
        None,
    )
    target = jnp.array([20, 20, 20, 5, 0, 143, 7, 20])
    got = answers.digits_reward(parsed, target)
    np.testing.assert_allclose(got, [0.0, 1.0, 0.5, 1.0, 1.0, 2 / 3, 0.0, 0.0], rtol=1e-6)
    total = answers.total_reward({"exact": 1.0, "digits": 0.5}, parsed, target)
    np.testing.assert_allclose(total, [0.0, 1.5, 0.25, 1.5, 1.5, 1 / 3, 0.0, 0.0], rtol=1e-6)


# ----------------------------------------------------------------------------- the bank


def test_prompts_are_left_padded_and_held_out_by_question(tiny_lm_folder):
    tok = load_tokenizer(tiny_lm_folder, "chatml", "Be brief.")
    problems = word_problems.generate_problems(2000, 4)
    train, held = bank.split(problems)
    assert 0.07 < len(held) / len(problems) < 0.13
    assert not {p.question for p in train} & {p.question for p in held}
    rows = bank.prompt_bank(tok, held[:50], "Think.", None)
    width = rows["tokens"].shape[1]
    assert width % 8 == 0 and rows["pad"].min() >= 0
    for p, ids, pad, answer in zip(held, rows["tokens"], rows["pad"], rows["answer"], strict=False):
        assert (ids[:pad] == tok.pad_id).all() and answer == p.answer
        assert list(ids[pad:]) == tok.encode(tok.render(f"{p.question}\nThink."))
    assert tok.render("Q") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    solutions, mask = bank.solutions(tok, held[:5], 48)
    for row, m in zip(solutions, mask, strict=True):
        n = int(m.sum())
        assert row[n - 1] == tok.eos_ids[0] and (row[n:] == tok.pad_id).all()
    with pytest.raises(ConfigError, match="max_prompt_len: problem"):
        bank.prompt_bank(tok, held[:50], "", 10)
    with pytest.raises(ConfigError, match="max_new_tokens: 4 cannot hold solution 0"):
        bank.solutions(tok, held[:5], 4)


def test_the_tokenizer_files_of_a_folder(tiny_lm_folder, tmp_path):
    import shutil

    tok = load_tokenizer(tiny_lm_folder)
    im_end, text_end = (
        tok.tokenizer.token_to_id("<|im_end|>"),
        tok.tokenizer.token_to_id("<|endoftext|>"),
    )
    assert tok.eos_ids == (im_end, text_end) and tok.pad_id == text_end
    assert tok.template == "chatml"  # its tokenizer_config.json's template is ChatML
    assert load_tokenizer(tiny_lm_folder, "none").render("Q") == "Q"
    llama = load_tokenizer(tiny_lm_folder, "llama3", "S").render("Q")
    assert llama == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    copy = tmp_path / "copy"
    shutil.copytree(tiny_lm_folder, copy)
    (copy / "generation_config.json").unlink()
    config = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(
        json.dumps({**config, "eos_token": "<|endoftext|>"})
    )
    assert load_tokenizer(copy).eos_ids == (text_end,)
    (copy / "tokenizer_config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="no end-of-sequence id"):
        load_tokenizer(copy)
    with pytest.raises(CheckpointError, match="chat_template: 'jinja'"):
        load_tokenizer(tiny_lm_folder, "jinja")
    (copy / "tokenizer.json").write_text("{}")
    with pytest.raises(CheckpointError, match="tokenizer.json: cannot be read as a tokenizer"):
        load_tokenizer(copy)
