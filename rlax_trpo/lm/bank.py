"""Word problems as an `LMTask`: tokenised once on the host into a bank of prompt ids, drawn
and scored inside the graph.

    problems (generated, or a JSONL file) --tokenizer, chat template--> prompts [N, P]
    (left-padded, pad [N]), answers [N]  + the vocabulary's digit table (`answers`)

A fixed held-out split: a problem is held out when a hash of its question is 0 modulo
`EVAL_MODULUS` (the same question is never in both splits), or, for a user's data, when it
comes from `eval_path`. `sample` draws training rows uniformly; `reward` parses each
completion's answer from its token ids (`rlax_trpo.lm.answers`) and sums the named rewards.
`solutions` gives the worked solutions as completion ids, for a supervised start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.errors import ConfigError
from rlax_trpo.lm import answers
from rlax_trpo.lm.types import LMTask, Prompts
from rlax_trpo.lm.word_problems import WordProblem

EVAL_MODULUS = 10


def held_out(question: str) -> bool:
    """Whether a question belongs to the held-out split (a stable hash, not Python's)."""
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "little") % EVAL_MODULUS == 0


def split(problems: Sequence[WordProblem]) -> tuple[list[WordProblem], list[WordProblem]]:
    """(training, held-out) problems by `held_out`."""
    train = [p for p in problems if not held_out(p.question)]
    return train, [p for p in problems if held_out(p.question)]


def prompt_bank(
    tokenizer, problems: Sequence[WordProblem], instruction: str, max_prompt_len: int | None
) -> dict[str, np.ndarray]:
    """`tokens [N, P]` (left-padded with the pad id), `pad [N]` and `answer [N]` of the
    problems' chat prompts (question, a blank line, `instruction`). P is the longest prompt
    rounded up to a multiple of 8; a prompt over `max_prompt_len` is a `ConfigError`."""
    texts = [f"{p.question}\n{instruction}".rstrip() for p in problems]
    ids = [tokenizer.prompt_ids(t) for t in texts]
    longest = max(len(x) for x in ids)
    if max_prompt_len is not None and longest > max_prompt_len:
        row = next(i for i, x in enumerate(ids) if len(x) == longest)
        raise ConfigError(
            f"max_prompt_len: problem {row} is {longest} tokens long, more than {max_prompt_len}"
        )
    width = -(-longest // 8) * 8
    tokens = np.full((len(ids), width), tokenizer.pad_id, np.int32)
    for i, x in enumerate(ids):
        tokens[i, width - len(x) :] = x
    pad = np.asarray([width - len(x) for x in ids], np.int32)
    return {
        "tokens": tokens,
        "pad": pad,
        "answer": np.asarray([p.answer for p in problems], np.int32),
    }


def solutions(
    tokenizer, problems: Sequence[WordProblem], length: int
) -> tuple[np.ndarray, np.ndarray]:
    """The worked solutions as completions: ids `[N, length]` (the solution, then the first
    end id, then padding) and their mask; a solution that does not fit is a `ConfigError`."""
    tokens = np.full((len(problems), length), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(problems), length), np.float32)
    for i, p in enumerate(problems):
        ids = [*tokenizer.encode(" " + p.solution.strip()), tokenizer.eos_ids[0]]
        if len(ids) > length:
            raise ConfigError(f"max_new_tokens: {length} cannot hold solution {i} ({len(ids)})")
        tokens[i, : len(ids)] = ids
        mask[i, : len(ids)] = 1.0
    return tokens, mask


def word_problem_task(
    name: str,
    tokenizer,
    train: Sequence[WordProblem],
    held: Sequence[WordProblem],
    vocab_size: int,
    rewards: dict[str, float],
    instruction: str = "",
    max_prompt_len: int | None = None,
) -> LMTask:
    """The `LMTask` of tokenised problems: prompts drawn from `train`, evaluated on `held`,
    rewarded by `sum_name weight * REWARDS[name]` (`rlax_trpo.lm.answers`)."""
    if not train or not held:
        raise ConfigError(f"task {name}: needs training and held-out problems")
    unknown = sorted(set(rewards) - set(answers.REWARDS))
    if unknown:
        raise ConfigError(f"rewards: {unknown[0]!r} is not a reward ({', '.join(answers.REWARDS)})")
    banks = [prompt_bank(tokenizer, ps, instruction, max_prompt_len) for ps in (train, held)]
    width = max(b["tokens"].shape[1] for b in banks)
    banks = [_widen(b, width, tokenizer.pad_id) for b in banks]
    table = answers.build_table(tokenizer.token_texts(vocab_size))
    data = {"train": banks[0], "eval": banks[1], "table": table}
    eos = tuple(tokenizer.eos_ids)
    weights = dict(rewards)

    def sample(data, key, n):
        rows = jax.random.randint(key, (n,), 0, data["train"]["answer"].shape[0])
        bank = jax.tree.map(lambda x: jnp.asarray(x)[rows], data["train"])
        return Prompts(bank["tokens"], bank["pad"], bank["answer"])

    def reward(data, tokens, mask, target, hp):
        ended = jnp.any(jnp.isin(tokens, jnp.asarray(eos)) & (mask > 0), axis=1)
        parsed = answers.parse_completions(data["table"], tokens, mask, ended)
        exact = answers.exact_reward(parsed, target) > 0
        return answers.total_reward(weights, parsed, target), exact

    def eval_prompts(data, n):
        bank = jax.tree.map(lambda x: jnp.asarray(x[:n]), (data or {"eval": banks[1]})["eval"])
        return Prompts(bank["tokens"], bank["pad"], bank["answer"])

    return LMTask(name, width, sample, reward, eval_prompts, data)


def _widen(bank: dict[str, np.ndarray], width: int, pad_id: int) -> dict[str, np.ndarray]:
    """A bank left-padded to `width` columns."""
    extra = width - bank["tokens"].shape[1]
    tokens = np.pad(bank["tokens"], ((0, 0), (extra, 0)), constant_values=pad_id)
    return {**bank, "tokens": tokens, "pad": bank["pad"] + extra}
