"""Arithmetic word problems in the style of GSM8K (Cobbe et al. 2021), from a seeded generator:
quantities, prices, change, rates, equal shares, savings and ages, one to three steps each
(and two easier one-step kinds, `boxes` and `more`, by name), integer answers, and a worked
solution in GSM8K's form ("3 * 12 = 36. 36 - 7 = 29. #### 29").

No data set can be downloaded on every machine, so the tasks are generated; a user's own data
enters as a JSONL file of `{"prompt", "answer"}` rows (`read_jsonl`). Everything here is host
Python: the problems are tokenised once into a bank of prompt ids (`rlax_trpo.lm.bank`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import NamedTuple

from rlax_trpo.errors import ConfigError

NAMES = (
    "Ava",
    "Ben",
    "Chloe",
    "Dan",
    "Emma",
    "Finn",
    "Grace",
    "Hugo",
    "Ivy",
    "Jack",
    "Kira",
    "Leo",
    "Maya",
    "Noah",
    "Olga",
    "Pablo",
    "Rosa",
    "Sam",
    "Tara",
    "Omar",
)
ITEMS = (
    "apples",
    "pencils",
    "stickers",
    "books",
    "marbles",
    "cookies",
    "cards",
    "shells",
    "stamps",
    "eggs",
    "balloons",
    "candles",
)
SHOP = (("pens", "notebooks"), ("apples", "pears"), ("cups", "plates"), ("toys", "games"))
VEHICLES = ("car", "bus", "train", "truck", "boat")
ANSWER_MARK = "####"  # GSM8K's: the final answer follows it


class WordProblem(NamedTuple):
    """A question, its worked solution (steps, then `#### answer`) and the integer answer."""

    question: str
    solution: str
    answer: int


def _steps(*steps: tuple[int, str, int, int]) -> str:
    return " ".join(f"{a} {op} {b} = {r}." for a, op, b, r in steps)


def _groups_left(r: random.Random) -> WordProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(2, 9), r.randint(2, 12)
    c = r.randint(1, a * b - 1)
    q = (
        f"{name} has {a} boxes of {item} with {b} {item} in each box. {name} gives away {c} "
        f"{item}. How many {item} does {name} have left?"
    )
    return WordProblem(q, _steps((a, "*", b, a * b), (a * b, "-", c, a * b - c)), a * b - c)


def _shopping(r: random.Random) -> WordProblem:
    name, (x, y) = r.choice(NAMES), r.choice(SHOP)
    p, s = r.randint(2, 9), r.randint(2, 9)
    a, b = r.randint(2, 6), r.randint(2, 6)
    q = (
        f"{x.capitalize()} cost ${p} each and {y} cost ${s} each. {name} buys {a} {x} and {b} "
        f"{y}. How many dollars does {name} spend?"
    )
    total = a * p + b * s
    return WordProblem(
        q, _steps((a, "*", p, a * p), (b, "*", s, b * s), (a * p, "+", b * s, total)), total
    )


def _change(r: random.Random) -> WordProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, p = r.randint(2, 8), r.randint(2, 9)
    bill = r.choice([b for b in (20, 50, 100) if b > a * p])
    q = (
        f"{name} buys {a} {item} at ${p} each and pays with a ${bill} bill. How many dollars "
        f"of change does {name} get?"
    )
    return WordProblem(
        q, _steps((a, "*", p, a * p), (bill, "-", a * p, bill - a * p)), bill - a * p
    )


def _distance(r: random.Random) -> WordProblem:
    vehicle, s, t = r.choice(VEHICLES), r.randint(11, 60), r.randint(2, 9)
    q = f"A {vehicle} travels {s} miles every hour. How many miles does it travel in {t} hours?"
    return WordProblem(q, _steps((s, "*", t, s * t)), s * t)


def _share(r: random.Random) -> WordProblem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    k, each, eaten = r.randint(2, 9), r.randint(2, 12), r.randint(1, 3)
    eaten = min(eaten, each - 1)
    q = (
        f"{name} shares {k * each} {item} equally among {k} friends. Each friend then loses "
        f"{eaten} of them. How many {item} does each friend have now?"
    )
    sol = _steps((k * each, "/", k, each), (each, "-", eaten, each - eaten))
    return WordProblem(q, sol, each - eaten)


def _hours(r: random.Random) -> WordProblem:
    item, rate, hours = r.choice(ITEMS), r.randint(3, 15), r.randint(2, 9)
    q = (
        f"A machine makes {rate} {item} every hour. How many hours does it need to make "
        f"{rate * hours} {item}?"
    )
    return WordProblem(q, _steps((rate * hours, "/", rate, hours)), hours)


def _combine(r: random.Random) -> WordProblem:
    n1, n2 = r.sample(NAMES, 2)
    item, a, b, c = r.choice(ITEMS), r.randint(5, 40), r.randint(5, 40), r.randint(2, 20)
    q = (
        f"{n1} picks {a} {item} on Monday and {b} {item} on Tuesday. {n2} picks {c} more "
        f"{item} than {n1} picked in all. How many {item} does {n2} pick?"
    )
    return WordProblem(q, _steps((a, "+", b, a + b), (a + b, "+", c, a + b + c)), a + b + c)


def _savings(r: random.Random) -> WordProblem:
    name, a, w = r.choice(NAMES), r.randint(3, 15), r.randint(2, 9)
    c = r.randint(1, a * w - 1)
    q = (
        f"{name} saves ${a} every week. After {w} weeks, {name} spends ${c}. How many dollars "
        f"does {name} have left?"
    )
    return WordProblem(q, _steps((a, "*", w, a * w), (a * w, "-", c, a * w - c)), a * w - c)


def _ages(r: random.Random) -> WordProblem:
    n1, n2 = r.sample(NAMES, 2)
    a, k, b = r.randint(2, 12), r.randint(2, 4), r.randint(2, 15)
    q = (
        f"{n1} is {a} years old. {n2} is {k} times as old as {n1}. How old will {n2} be in "
        f"{b} years?"
    )
    return WordProblem(q, _steps((a, "*", k, a * k), (a * k, "+", b, a * k + b)), a * k + b)


def _boxes(r: random.Random) -> WordProblem:
    name, item, a, b = r.choice(NAMES), r.choice(ITEMS), r.randint(2, 9), r.randint(2, 9)
    q = f"{name} has {a} boxes with {b} {item} in each box. How many {item} does {name} have?"
    return WordProblem(q, _steps((a, "*", b, a * b)), a * b)


def _more(r: random.Random) -> WordProblem:
    name, item, a, b = r.choice(NAMES), r.choice(ITEMS), r.randint(2, 20), r.randint(2, 20)
    q = f"{name} has {a} {item} and finds {b} more. How many {item} does {name} have now?"
    return WordProblem(q, _steps((a, "+", b, a + b)), a + b)


TEMPLATES = {
    "groups_left": _groups_left,
    "shopping": _shopping,
    "change": _change,
    "distance": _distance,
    "share": _share,
    "hours": _hours,
    "combine": _combine,
    "savings": _savings,
    "ages": _ages,
    "boxes": _boxes,  # one step each, single-digit products and small sums: easier
    "more": _more,
}
KINDS = tuple(TEMPLATES)
DEFAULT_KINDS = KINDS[:9]  # the default mix: one to three steps


def generate_problems(
    n: int, seed: int, kinds: tuple[str, ...] = DEFAULT_KINDS
) -> list[WordProblem]:
    """`n` problems from `seed` (the same list on every machine and Python version: one
    `random.Random` stream), each of one of `kinds` (`TEMPLATES`' names) at random."""
    rng = random.Random(seed)
    templates = [TEMPLATES[k] for k in kinds]
    problems = (rng.choice(templates)(rng) for _ in range(n))
    return [p._replace(solution=f"{p.solution} {ANSWER_MARK} {p.answer}") for p in problems]


def read_jsonl(path: str | Path) -> list[WordProblem]:
    """A user's problems: one JSON object a line with a string `prompt` and an integer
    `answer` (an int or a string of digits); a `solution` string is kept when there is one.
    Bad rows are a one-line `ConfigError` naming the file and line."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"data_path: {path} cannot be read ({err})") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"data_path: {path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{where}: not JSON ({err.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ConfigError(f"{where}: needs a string 'prompt'")
        answer = row.get("answer")
        if isinstance(answer, str) and answer.strip().isdigit():
            answer = int(answer.strip())
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < 10**9:
            raise ConfigError(f"{where}: 'answer' must be an integer in [0, 1e9)")
        rows.append(WordProblem(row["prompt"], str(row.get("solution", "")), answer))
    if not rows:
        raise ConfigError(f"data_path: {path} holds no rows")
    return rows
