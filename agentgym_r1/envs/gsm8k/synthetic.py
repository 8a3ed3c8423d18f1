"""Generated multi-step arithmetic word problems, with gold answers and expert calculator traces.

A problem starts from a quantity and applies a chain of operations, one sentence and one calculator expression
each; the answer is the last value. Problem ``index`` under ``seed`` is a pure function of both: the same pair
always gives the same problem, and any index gives one (the source is unlimited).

Difficulty (:class:`Knobs`, levels in :data:`LEVELS`): more steps, larger starting numbers, steps phrased with a
unit to convert (dozens, days of work) and distractor sentences about a third person, whose numbers look like the
ones that count but are not part of the answer. ``easy`` is the original generator, draw for draw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agentgym_r1.core.difficulty import check_int, check_order, check_rate

NAMES = (
    "Ava",
    "Ben",
    "Chloe",
    "Dev",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jamal",
    "Kira",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Uma",
    "Victor",
    "Wen",
    "Yusuf",
    "Zoe",
)
ITEMS = (
    "apples",
    "marbles",
    "stickers",
    "books",
    "cookies",
    "pencils",
    "shells",
    "cards",
    "stamps",
    "beads",
    "coins",
    "eggs",
    "balloons",
    "crayons",
    "buttons",
)
CONTAINERS = ("boxes", "bags", "packs", "jars", "crates", "baskets")
GOODS = ("notebooks", "tickets", "plants", "shirts", "lamps", "mugs", "puzzles", "scarves")

MAX_VALUE = 100_000
OTHERS = ("Coach Rivera", "Aunt Lena", "Grandpa Joe", "Professor Hale", "Captain Ortiz", "Uncle Tom")
MAX_STEPS = 12


@dataclass(frozen=True)
class Knobs:
    """What makes a generated problem harder. ``units``: the chance that a step is phrased with a unit to convert;
    ``distractors``: sentences about a third person whose numbers are not part of the answer; ``scale``: the
    starting quantity is multiplied by it."""

    min_steps: int = 2
    max_steps: int = 4
    distractors: int = 0
    units: float = 0.0
    scale: int = 1

    def __post_init__(self) -> None:
        for name in ("min_steps", "max_steps"):
            check_int("GSM8K synthetic", name, getattr(self, name), 1, MAX_STEPS)
        check_order("min_steps", self.min_steps, "max_steps", self.max_steps)
        check_int("GSM8K synthetic", "distractors", self.distractors, 0, 4)
        check_rate("GSM8K synthetic", "units", self.units)
        check_int("GSM8K synthetic", "scale", self.scale, 1, 100)


LEVELS = {
    "easy": Knobs(),
    "medium": Knobs(min_steps=3, max_steps=5, distractors=0, units=0.1, scale=5),
    "hard": Knobs(min_steps=4, max_steps=5, distractors=2, units=0.5, scale=10),
}


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


# Steps with a unit to convert (harder levels).
def _buy_dozens(rng, x, w):
    b = _int(rng, 2, 5)
    return f"{w['P']} gets {b} dozen more {w['items']}.", f"{x} + {b} * 12", x + b * 12


def _give_dozen(rng, x, w):
    if x < 13:
        return None
    b = _int(rng, 1, (x - 1) // 12)
    return f"{w['P']} gives {b} dozen {w['items']} to {w['friend']}.", f"{x} - {b} * 12", x - b * 12


def _earn_days(rng, x, w):
    d, h, rate = _int(rng, 2, 6), _int(rng, 2, 8), _int(rng, 5, 30)
    return (
        f"{w['P']} works {h} hours a day for {d} days at ${rate} an hour.",
        f"{x} + {d} * {h} * {rate}",
        x + d * h * rate,
    )


def _spend_weeks(rng, x, w):
    weeks, per = _int(rng, 2, 4), _int(rng, 2, 15)
    if x < weeks * 7 * per:
        return None
    return (f"{w['P']} spends ${per} a day for {weeks} weeks.", f"{x} - {weeks} * 7 * {per}", x - weeks * 7 * per)


UNIT_OPS: dict[bool, tuple[Op, ...]] = {False: (_buy_dozens, _give_dozen), True: (_earn_days, _spend_weeks)}


def _distractor(rng: np.random.Generator, money: bool, w: dict[str, str]) -> str:
    """A sentence about a third person: its numbers look like a step's but are not part of the answer."""
    who = str(rng.choice(OTHERS))
    a, b = _int(rng, 2, 40), _int(rng, 2, 25)
    if money:
        options = (
            f"{who} works {a} hours at ${b} an hour.",
            f"{who} buys {b} {w['goods']} at ${a} each.",
            f"{who} has ${a * b} in a piggy bank.",
        )
    else:
        options = (
            f"{who} gets {a} more {w['items']}.",
            f"{who} buys {b} {w['box']} with {a} {w['items']} in each.",
            f"{who} has {a * b} {w['items']} at home.",
        )
    return options[_int(rng, 0, len(options) - 1)]


def generate_problem(
    seed: int, index: int, min_steps: int | None = None, max_steps: int | None = None, knobs: Knobs | None = None
) -> Problem:
    """Problem ``index`` of the stream seeded by ``seed`` at ``knobs`` (default ``easy``), with ``min_steps`` to
    ``max_steps`` calculator steps (default: the knobs')."""
    k = knobs or Knobs()
    min_steps = k.min_steps if min_steps is None else min_steps
    max_steps = k.max_steps if max_steps is None else max_steps
    rng = np.random.default_rng([seed, index, 0x65D])
    steps = _int(rng, min_steps, max_steps)
    name, friend = (str(n) for n in rng.choice(NAMES, size=2, replace=False))
    she = bool(rng.integers(2))
    words = {
        "P": "She" if she else "He",
        "pp": "she" if she else "he",
        "pp2": "her" if she else "him",
        "ppos": "her" if she else "his",
        "friend": friend,
        "items": str(rng.choice(ITEMS)),
        "box": str(rng.choice(CONTAINERS)),
        "goods": str(rng.choice(GOODS)),
    }
    money = bool(rng.integers(2))
    x = (_int(rng, 20, 200) if money else _int(rng, 5, 60)) * k.scale
    ops = MONEY_OPS if money else ITEM_OPS
    opening = f"{name} has ${x}." if money else f"{name} has {x} {words['items']}."
    sentences, expressions = [opening], []
    attempts = 0
    while len(expressions) < steps and attempts < 100:
        attempts += 1
        unit = k.units > 0 and rng.random() < k.units  # no draw at all on easy: its problems stay as they were
        pool = UNIT_OPS[money] if unit else ops
        out = pool[_int(rng, 0, len(pool) - 1)](rng, x, words)
        if out is None or not 0 <= out[2] <= MAX_VALUE:
            continue
        sentence, expr, x = out
        sentences.append(sentence)
        expressions.append(expr)
    for _ in range(k.distractors):
        sentences.insert(_int(rng, 1, len(sentences)), _distractor(rng, money, words))
    question = (
        f"How many dollars does {name} have now?" if money else f"How many {words['items']} does {name} have now?"
    )
    return Problem(" ".join([*sentences, question]), str(x), expressions)
