"""Reading a number out of a completion's token ids inside the graph, and the rewards built on it.

Nothing is decoded to text inside an iteration. Instead a table over the vocabulary, built once
on the host from the tokenizer, gives each token's text as a short *signature* of character
classes: each ASCII digit kept (codes 10-19), every other character one of `OTHER`, `TRAILING`
(whitespace, '.' and '!') or `HASH` ('#'), runs of one non-digit class collapsed to one code,
and `NEUTRAL` padding (a token that decodes to nothing, such as a special token, is all
NEUTRAL). Gathering the completion's signatures gives one row of codes per completion, on
which the parse is a few cumulative sums, no loop over tokens:

  * the answer is the **last maximal run of ASCII digits** in the decoded completion, as an
    integer (None when there is none or it has more than 9 digits);
  * the answer **format** holds when the completion ended (an EOS within its budget), the run
    comes after a '#' (GSM8K's `#### 42`), and nothing but `TRAILING` characters follows it.

`parse_text` is the same rule on decoded text, with a regular expression; the tests hold the
two to each other on random completions for Qwen's (one digit a token), Llama 3's (1-3 digits a
token) and GPT-2's (irregular merges, a leading space) vocabularies. Qwen, Llama 3 and GPT-2
decode bytes (ByteLevel), so a token's text in context is the decoding of the token after an
anchor less the anchor's; digits, whitespace and '#' are single bytes, never part of a split
multi-byte character.

Rewards are pure functions of the parse, registered by name (`REWARDS`, `register_reward`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

NEUTRAL, OTHER, TRAILING, HASH, DIGIT0 = 0, 1, 2, 3, 10
TRAILING_CHARS = " \t\n\r.!"
MAX_DIGITS = 9  # longer runs are no answer (int32)
_RUN = re.compile(r"[0-9]+")


def char_code(ch: str) -> int:
    """The class code of one character."""
    if "0" <= ch <= "9":
        return DIGIT0 + ord(ch) - ord("0")
    if ch == "#":
        return HASH
    return TRAILING if ch in TRAILING_CHARS else OTHER


def signature(text: str) -> list[int]:
    """The codes of `text`, runs of one non-digit class collapsed."""
    out: list[int] = []
    for ch in text:
        code = char_code(ch)
        if code < DIGIT0 and out and out[-1] == code:
            continue
        out.append(code)
    return out


def build_table(texts: Sequence[str]) -> np.ndarray:
    """`[V, K]` int8 signatures of every token's text in context (`texts[i]` for id i), padded
    with NEUTRAL to the longest, K."""
    sigs = [signature(t) for t in texts]
    width = max(1, max(len(s) for s in sigs))
    table = np.zeros((len(sigs), width), np.int8)
    for i, sig in enumerate(sigs):
        table[i, : len(sig)] = sig
    return table


class Parsed(NamedTuple):
    """What the parse read from each completion, `[B]` each."""

    value: jax.Array  # int32, the last run of digits (0 where not valid)
    valid: jax.Array  # bool: a run of 1-9 digits was found
    format: jax.Array  # bool: ended, after a '#', only trailing characters after it
    ended: jax.Array  # bool: an end-of-sequence id within the budget


def parse_completions(
    table: jax.Array, tokens: jax.Array, mask: jax.Array, ended: jax.Array
) -> Parsed:
    """The answer of each completion, read from its signature codes (module docstring).

    Args:
      table: `[V, K]` `build_table` signatures.
      tokens: `[B, C]` completion ids; mask `[B, C]` 1 on generated tokens (EOS included).
      ended: `[B]` bool, the completion emitted an end-of-sequence id.
    """
    chex.assert_rank([tokens, mask], 2)
    codes = jnp.asarray(table)[tokens].astype(jnp.int32)
    codes = jnp.where(mask[..., None] > 0, codes, NEUTRAL)
    codes = codes.reshape(tokens.shape[0], -1)  # [B, L]
    idx = jnp.arange(codes.shape[1])
    digit = codes >= DIGIT0
    last = jnp.max(jnp.where(digit, idx, -1), axis=1)  # the run's last digit, -1: none
    breaks = (codes > NEUTRAL) & ~digit
    before = jnp.max(jnp.where(breaks & (idx < last[:, None]), idx, -1), axis=1)
    count = jnp.cumsum(digit, axis=1)  # digits up to and including each position
    total, start = _count_at(count, last), _count_at(count, before)
    in_run = digit & (idx > before[:, None]) & (idx <= last[:, None])
    power = jnp.clip(total[:, None] - count, 0, MAX_DIGITS)
    terms = jnp.where(in_run, (codes - DIGIT0) * jnp.power(10, power), 0)
    valid = (last >= 0) & (total - start <= MAX_DIGITS)
    value = jnp.where(valid, terms.sum(axis=1), 0)
    hashed = jnp.any((codes == HASH) & (idx <= before[:, None]), axis=1)
    after = idx > last[:, None]
    clean = ~jnp.any(after & ((codes == OTHER) | (codes == HASH)), axis=1)
    return Parsed(value.astype(jnp.int32), valid, valid & hashed & clean & ended, ended)


def _count_at(count: jax.Array, i: jax.Array) -> jax.Array:
    """`count[b, i[b]]`, 0 where i[b] < 0."""
    found = jnp.take_along_axis(count, jnp.maximum(i, 0)[:, None], axis=1)[:, 0]
    return jnp.where(i >= 0, found, 0)


def parse_text(text: str, ended: bool = True) -> tuple[int | None, bool]:
    """The same rule on decoded text: (the answer or None, the format holds)."""
    runs = list(_RUN.finditer(text))
    if not runs:
        return None, False
    run = runs[-1]
    if len(run.group()) > MAX_DIGITS:
        return None, False
    tail_clean = all(ch in TRAILING_CHARS for ch in text[run.end() :])
    return int(run.group()), bool(ended and "#" in text[: run.start()] and tail_clean)


# ----------------------------------------------------------------------------- rewards

RewardFn = Callable[[Parsed, jax.Array], jax.Array]


def exact_reward(parsed: Parsed, answer: jax.Array) -> jax.Array:
    """1 where the completion's answer equals the target, else 0."""
    return (parsed.valid & (parsed.value == answer)).astype(jnp.float32)


def format_reward(parsed: Parsed, answer: jax.Array) -> jax.Array:
    """1 where the completion ends in `#### <number>` and stops, else 0."""
    return parsed.format.astype(jnp.float32)


def _digits(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Decimal digits `[B, MAX_DIGITS]` of non-negative ints (least significant first) and
    how many there are `[B]` (1 for 0)."""
    powers = 10 ** jnp.arange(MAX_DIGITS, dtype=jnp.int32)
    digits = (x[:, None] // powers) % 10
    count = jnp.maximum(1, jnp.sum(x[:, None] >= powers, axis=1))
    return digits, count


def digits_reward(parsed: Parsed, answer: jax.Array) -> jax.Array:
    """Partial credit: the fraction of the target's digits the answer has in place (aligned
    at the units), where it has as many digits; 0 for an answer of another length or none.
    The partial credit of the tiny model's tasks (`rlax_trpo.lm.tasks.score`) for numbers."""
    got, got_count = _digits(parsed.value)
    want, count = _digits(answer)
    used = jnp.arange(MAX_DIGITS)[None] < count[:, None]
    frac = jnp.sum((got == want) & used, axis=1) / count
    return jnp.where(parsed.valid & (got_count == count), frac, 0.0).astype(jnp.float32)


REWARDS: dict[str, RewardFn] = {
    "exact": exact_reward,
    "format": format_reward,
    "digits": digits_reward,
}


def register_reward(name: str, fn: RewardFn) -> None:
    """Make `fn(parsed, answer) -> [B] float32` a reward a config can name (`rewards:`)."""
    REWARDS[name] = fn


def total_reward(weights: dict[str, float], parsed: Parsed, answer: jax.Array) -> jax.Array:
    """sum_name weight * REWARDS[name](parsed, answer), `[B]`."""
    parts = [w * REWARDS[name](parsed, answer) for name, w in sorted(weights.items())]
    return sum(parts[1:], parts[0])
