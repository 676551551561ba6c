"""Question-answer tasks with verifiable rewards, as pure JAX functions.

Vocabulary (`VOCAB_SIZE` ids):
    0 PAD   1 EOS   2..11 the digits 0..9   12 '+'   13 '='

Every task has a fixed prompt length, so a batch of prompts needs no padding, and a
`target` of `answer_len + 1` tokens: the answer, then EOS, then PAD where the answer is
shorter (`add`). A completion (PAD after its EOS, as the sampler writes it) is an exact
match when its first `answer_len + 1` tokens equal the target.

    max_digit  "3 9 1 4 ="      -> "9 <eos>"              (one-token answer)
    sort       "3 9 1 4 ="      -> "1 3 4 9 <eos>"        (k digits)
    add        "0 4 2 + 9 1 3 =" -> "5 5 9 <eos>"          (955, least significant digit first
                                                           when `reverse_answer`, the default)

Held-out split: a prompt belongs to the evaluation split when a fixed integer hash of its
tokens is 0 modulo `EVAL_MODULUS`; training prompts are redrawn (a fixed number of times,
static shapes) until they fall outside it, so greedy accuracy is measured on prompts the
policy never trained on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.lm.types import LMTask, Prompts

PAD, EOS, PLUS, EQUALS = 0, 1, 12, 13
DIGIT0 = 2
VOCAB_SIZE = 14
EVAL_MODULUS = 10
_TRAIN_TRIES = 8  # P(a drawn prompt stays in the eval split) = 0.1 ** 8
_SYMBOLS = {PAD: "", EOS: "$", PLUS: "+", EQUALS: "="}


class Task(NamedTuple):
    """A task: prompt/target generator and its shapes.

    Attributes:
      name: task name.
      prompt_len: tokens per prompt (fixed).
      answer_len: most answer tokens, EOS excluded; targets are `[n, answer_len + 1]`.
      generate: `(key, n) -> (prompts [n, prompt_len], targets [n, answer_len + 1])`,
        uniform over all prompts (both splits).
    """

    name: str
    prompt_len: int
    answer_len: int
    generate: Callable[[jax.Array, int], tuple[jax.Array, jax.Array]]


def _digits(key: jax.Array, n: int, k: int) -> jax.Array:
    return jax.random.randint(key, (n, k), 0, 10)


def _number_digits(x: jax.Array, width: int) -> jax.Array:
    """Decimal digits of non-negative ints `x [n]`, most significant first, `[n, width]`."""
    powers = 10 ** jnp.arange(width - 1, -1, -1)
    return (x[:, None] // powers[None, :]) % 10


def _with_eos(answer_tokens: jax.Array, length: jax.Array | None = None) -> jax.Array:
    """Append EOS after `length` tokens (all of them if None) and PAD the rest: `[n, A + 1]`."""
    n, a = answer_tokens.shape
    if length is None:
        return jnp.concatenate([answer_tokens, jnp.full((n, 1), EOS, answer_tokens.dtype)], 1)
    pos = jnp.arange(a + 1)[None, :]
    padded = jnp.concatenate([answer_tokens, jnp.zeros((n, 1), answer_tokens.dtype)], 1)
    return jnp.where(pos < length[:, None], padded, jnp.where(pos == length[:, None], EOS, PAD))


def max_digit_task(num_digits: int = 5) -> Task:
    """Prompt: `num_digits` digits then '='; answer: their largest digit (one token)."""

    def generate(key, n):
        d = _digits(key, n, num_digits)
        prompts = jnp.concatenate([d + DIGIT0, jnp.full((n, 1), EQUALS)], 1)
        return prompts.astype(jnp.int32), _with_eos(d.max(1, keepdims=True) + DIGIT0).astype(
            jnp.int32
        )

    return Task("max_digit", num_digits + 1, 1, generate)


def sort_task(num_digits: int = 4) -> Task:
    """Prompt: `num_digits` digits then '='; answer: the digits in ascending order."""

    def generate(key, n):
        d = _digits(key, n, num_digits)
        prompts = jnp.concatenate([d + DIGIT0, jnp.full((n, 1), EQUALS)], 1)
        return prompts.astype(jnp.int32), _with_eos(jnp.sort(d, axis=1) + DIGIT0).astype(jnp.int32)

    return Task("sort", num_digits + 1, num_digits, generate)


def add_task(num_digits: int = 3, reverse_answer: bool = True) -> Task:
    """Prompt: a '+' b '=' with a, b uniform in [0, 10**num_digits), each written with
    `num_digits` digits (leading zeros); answer: a + b without leading zeros (least
    significant digit first when `reverse_answer`)."""
    width = num_digits + 1

    def generate(key, n):
        ka, kb = jax.random.split(key)
        a = jax.random.randint(ka, (n,), 0, 10**num_digits)
        b = jax.random.randint(kb, (n,), 0, 10**num_digits)
        digits = _number_digits(a + b, width)  # most significant first, zero-padded
        nonzero = digits != 0
        length = jnp.where(nonzero.any(1), width - jnp.argmax(nonzero, axis=1), 1)
        if reverse_answer:
            answer = digits[:, ::-1]  # least significant first: the first `length` are the answer
        else:
            # shift left so the answer starts at position 0
            idx = jnp.arange(width)[None, :] + (width - length)[:, None]
            answer = jnp.take_along_axis(digits, jnp.minimum(idx, width - 1), axis=1)
        sep = lambda v: jnp.full((n, 1), v)
        prompts = jnp.concatenate(
            [
                _number_digits(a, num_digits) + DIGIT0,
                sep(PLUS),
                _number_digits(b, num_digits) + DIGIT0,
                sep(EQUALS),
            ],
            1,
        )
        return prompts.astype(jnp.int32), _with_eos(answer + DIGIT0, length).astype(jnp.int32)

    return Task("add", 2 * num_digits + 2, width, generate)


def make_task(name: str, num_digits: int, reverse_answer: bool = True) -> Task:
    """Build a task by name: "max_digit", "sort" or "add"."""
    if name == "max_digit":
        return max_digit_task(num_digits)
    if name == "sort":
        return sort_task(num_digits)
    if name == "add":
        return add_task(num_digits, reverse_answer)
    raise ValueError(f"unknown task {name!r}; use max_digit, sort, add")


def in_eval_split(prompts: jax.Array) -> jax.Array:
    """`[n]` bool: a fixed multiplicative hash of the prompt tokens is 0 mod EVAL_MODULUS."""
    h = jnp.zeros(prompts.shape[0], jnp.uint32)
    for i in range(prompts.shape[1]):
        h = (h * jnp.uint32(0x01000193)) ^ prompts[:, i].astype(jnp.uint32)  # FNV-1a style
    h = h * jnp.uint32(2654435761)
    return (h >> 16) % EVAL_MODULUS == 0


def sample_train(task: Task, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """`n` prompts and targets from the training split (outside the held-out split)."""
    keys = jax.random.split(key, _TRAIN_TRIES)
    prompts, targets = jax.vmap(lambda k: task.generate(k, n))(keys)  # [tries, n, ...]
    ok = ~jax.vmap(in_eval_split)(prompts)  # [tries, n]
    first = jnp.argmax(ok, axis=0)  # first try that is a training prompt (0 if none)
    pick = lambda x: jnp.take_along_axis(x, first[None, :, None], axis=0)[0]
    return pick(prompts), pick(targets)


def eval_set(task: Task, n: int, seed: int = 12345) -> tuple[jax.Array, jax.Array]:
    """Host-side: the first `n` held-out prompts (and targets) drawn with a fixed seed."""
    key = jax.random.key(seed)
    prompts, targets = [], []
    count = 0
    while count < n:
        key, sub = jax.random.split(key)
        p, t = task.generate(sub, 20 * n)
        keep = np.asarray(in_eval_split(p))
        prompts.append(np.asarray(p)[keep])
        targets.append(np.asarray(t)[keep])
        count += int(keep.sum())
    return jnp.asarray(np.concatenate(prompts)[:n]), jnp.asarray(np.concatenate(targets)[:n])


def score(
    completions: jax.Array, targets: jax.Array, partial_credit: float | jax.Array = 0.0
) -> tuple[jax.Array, jax.Array]:
    """Verifiable reward of completions against targets.

        exact_i  = all_j (c_ij == y_ij)  for j < A + 1   (answer and EOS in place)
        reward_i = 1 if exact_i else partial_credit * mean_{j: y_ij != PAD} [c_ij == y_ij]

    Args:
      completions: `[B, C]` tokens, PAD after EOS, `C >= A + 1`.
      targets: `[B, A + 1]` answer tokens, EOS, PAD.
      partial_credit: reward per fraction of correct positions when not exact (0 disables).

    Returns:
      (reward `[B]` float32, exact `[B]` bool).
    """
    chex.assert_rank([completions, targets], 2)
    width = targets.shape[1]
    if completions.shape[1] < width:
        raise ValueError(f"completions of {completions.shape[1]} tokens cannot hold {width}")
    head = completions[:, :width]
    match = head == targets
    exact = jnp.all(match, axis=1)
    counted = (targets != PAD).astype(jnp.float32)
    frac = jnp.sum(match * counted, axis=1) / jnp.maximum(jnp.sum(counted, axis=1), 1.0)
    reward = jnp.where(exact, 1.0, partial_credit * frac)
    return reward.astype(jnp.float32), exact


def detokenize(tokens) -> str:
    """Text of a token row: digits, '+', '=', '$' for EOS, nothing for PAD."""
    out = []
    for t in np.asarray(tokens).tolist():
        out.append(str(t - DIGIT0) if DIGIT0 <= t < DIGIT0 + 10 else _SYMBOLS.get(t, "?"))
    return "".join(out)


def as_lm_task(task: Task) -> LMTask:
    """A generated task as the `LMTask` GRPO reads: unpadded prompts, the answer tokens as the
    target, `score` with `hp.partial_credit` as the reward; no data arrays."""

    def sample(data, key, n):
        prompts, targets = sample_train(task, key, n)
        return Prompts(prompts, jnp.zeros(n, jnp.int32), targets)

    def reward(data, tokens, mask, target, hp):
        return score(tokens, target, hp.partial_credit)

    def eval_prompts(data, n):
        prompts, targets = eval_set(task, n)
        return Prompts(prompts, jnp.zeros(n, jnp.int32), targets)

    return LMTask(task.name, task.prompt_len, sample, reward, eval_prompts)
