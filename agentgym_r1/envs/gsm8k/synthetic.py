"""Generated multi-step arithmetic word problems, with gold answers and expert calculator traces.

A problem starts from a quantity and applies a chain of operations, one sentence and one calculator expression
each; the answer is the last value. Problem ``index`` under ``seed`` is a pure function of both: the same pair
always gives the same problem, and any index gives one (the source is unlimited).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

NAMES = ("Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam", "Maya",
         "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Victor", "Wen", "Yusuf", "Zoe")
ITEMS = ("apples", "marbles", "stickers", "books", "cookies", "pencils", "shells", "cards", "stamps", "beads",
         "coins", "eggs", "balloons", "crayons", "buttons")
CONTAINERS = ("boxes", "bags", "packs", "jars", "crates", "baskets")
GOODS = ("notebooks", "tickets", "plants", "shirts", "lamps", "mugs", "puzzles", "scarves")

MAX_VALUE = 100_000


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str
    expressions: list[str]


Op = Callable[[np.random.Generator, int, dict[str, str]], "tuple[str, str, int] | None"]


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


# Item problems: each op maps the current count x to a sentence, an expression and the new count (or None).
def _buy_more(rng, x, w):
    b = _int(rng, 2, 40)
    return f"{w['P']} gets {b} more {w['items']}.", f"{x} + {b}", x + b


def _give_away(rng, x, w):
    if x < 3:
        return None
    b = _int(rng, 1, x - 1)
    return f"{w['P']} gives {b} {w['items']} to {w['friend']}.", f"{x} - {b}", x - b


def _buy_containers(rng, x, w):
    b, c = _int(rng, 2, 9), _int(rng, 3, 24)
    return (f"{w['P']} buys {b} {w['box']} with {c} {w['items']} in each.", f"{x} + {b} * {c}", x + b * c)


def _multiply(rng, x, w):
    k = _int(rng, 2, 4)
    word = {2: "doubles", 3: "triples", 4: "quadruples"}[k]
    return f"{w['P']} {word} the number of {w['items']} {w['pp']} has.", f"{x} * {k}", x * k


def _split(rng, x, w):
    ks = [k for k in (2, 3, 4, 5, 6, 8, 10) if x % k == 0 and x > k]
    if not ks:
        return None
    k = ks[_int(rng, 0, len(ks) - 1)]
    return (f"{w['P']} splits the {w['items']} equally into {k} piles and keeps one pile.", f"{x} / {k}", x // k)


def _lose_fraction(rng, x, w):
    ks = [k for k in (2, 3, 4, 5) if x % k == 0 and x > k]
    if not ks:
        return None
    k = ks[_int(rng, 0, len(ks) - 1)]
    part = {2: "half", 3: "a third", 4: "a quarter", 5: "a fifth"}[k]
    return f"{w['P']} loses {part} of the {w['items']}.", f"{x} - {x} / {k}", x - x // k


ITEM_OPS: tuple[Op, ...] = (_buy_more, _give_away, _buy_containers, _multiply, _split, _lose_fraction)


# Money problems: x is dollars.
def _earn(rng, x, w):
    h, rate = _int(rng, 2, 12), _int(rng, 5, 30)
    return f"{w['P']} works {h} hours at ${rate} an hour.", f"{x} + {h} * {rate}", x + h * rate


def _spend(rng, x, w):
    if x < 5:
        return None
    n = _int(rng, 1, 6)
    price_max = x // n
    if price_max < 2:
        return None
    p = _int(rng, 1, min(price_max, 60))
    return f"{w['P']} buys {n} {w['goods']} at ${p} each.", f"{x} - {n} * {p}", x - n * p


def _gift(rng, x, w):
    b = _int(rng, 5, 100)
    return f"{w['friend']} gives {w['pp2']} ${b}.", f"{x} + {b}", x + b


def _save_fraction(rng, x, w):
    ks = [k for k in (2, 4, 5, 10) if x % k == 0 and x > k]
    if not ks:
        return None
    k = ks[_int(rng, 0, len(ks) - 1)]
    part = {2: "half", 4: "a quarter", 5: "a fifth", 10: "a tenth"}[k]
    return f"{w['P']} puts {part} of {w['ppos']} money into a savings account.", f"{x} - {x} / {k}", x - x // k


MONEY_OPS: tuple[Op, ...] = (_earn, _spend, _gift, _save_fraction)


def generate_problem(seed: int, index: int, min_steps: int = 2, max_steps: int = 4) -> Problem:
    """Problem ``index`` of the stream seeded by ``seed``, with ``min_steps`` to ``max_steps`` calculator steps."""
    rng = np.random.default_rng([seed, index, 0x65D])
    steps = _int(rng, min_steps, max_steps)
    name, friend = (str(n) for n in rng.choice(NAMES, size=2, replace=False))
    she = bool(rng.integers(2))
    words = {"P": "She" if she else "He", "pp": "she" if she else "he", "pp2": "her" if she else "him",
             "ppos": "her" if she else "his", "friend": friend, "items": str(rng.choice(ITEMS)),
             "box": str(rng.choice(CONTAINERS)), "goods": str(rng.choice(GOODS))}
    money = bool(rng.integers(2))
    x = _int(rng, 20, 200) if money else _int(rng, 5, 60)
    ops = MONEY_OPS if money else ITEM_OPS
    opening = f"{name} has ${x}." if money else f"{name} has {x} {words['items']}."
    sentences, expressions = [opening], []
    attempts = 0
    while len(expressions) < steps and attempts < 100:
        attempts += 1
        out = ops[_int(rng, 0, len(ops) - 1)](rng, x, words)
        if out is None or not 0 <= out[2] <= MAX_VALUE:
            continue
        sentence, expr, x = out
        sentences.append(sentence)
        expressions.append(expr)
    question = (f"How many dollars does {name} have now?" if money
                else f"How many {words['items']} does {name} have now?")
    return Problem(" ".join([*sentences, question]), str(x), expressions)
