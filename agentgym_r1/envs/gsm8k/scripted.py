"""A rule-based reader of the generated word problems: the honest scripted baseline for ``source="synthetic"``.

It knows the sentence patterns of :mod:`agentgym_r1.envs.gsm8k.synthetic` (not the answers) and turns each sentence
into a calculator expression over the running value. On other problems it finds no plan and answers what it has.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Step = Callable[[str], str]

_FRACTIONS = {"half": 2, "a third": 3, "a quarter": 4, "a fifth": 5, "a tenth": 10}
_TIMES = {"doubles": 2, "triples": 3, "quadruples": 4}
_PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Step]]] = [
    (re.compile(r"gets (\d+) more"), lambda m: lambda v: f"{v} + {m[1]}"),
    (re.compile(r"gives (\d+) \w+ to"), lambda m: lambda v: f"{v} - {m[1]}"),
    (re.compile(r"buys (\d+) \w+ with (\d+) \w+ in each"), lambda m: lambda v: f"{v} + {m[1]} * {m[2]}"),
    (re.compile(r"(doubles|triples|quadruples)"), lambda m: lambda v: f"{v} * {_TIMES[m[1]]}"),
    (re.compile(r"into (\d+) piles"), lambda m: lambda v: f"{v} / {m[1]}"),
    (
        re.compile(r"(?:loses|puts) (half|a third|a quarter|a fifth|a tenth) of"),
        lambda m: lambda v: f"{v} - {v} / {_FRACTIONS[m[1]]}",
    ),
    (re.compile(r"works (\d+) hours at \$(\d+)"), lambda m: lambda v: f"{v} + {m[1]} * {m[2]}"),
    (re.compile(r"buys (\d+) \w+ at \$(\d+) each"), lambda m: lambda v: f"{v} - {m[1]} * {m[2]}"),
    (re.compile(r"gives \w+ \$(\d+)"), lambda m: lambda v: f"{v} + {m[1]}"),
]
_START = re.compile(r"^\w+ has \$?(\d+)")


def plan_expressions(question: str) -> tuple[str | None, list[Step]]:
    """The starting value and one expression-maker per sentence after the first."""
    sentences = [s.strip() for s in re.split(r"(?<=[.?])\s+", question) if s.strip()]
    start = _START.match(sentences[0]) if sentences else None
    steps: list[Step] = []
    for sentence in sentences[1:]:
        for pattern, make in _PATTERNS:
            m = pattern.search(sentence)
            if m:
                steps.append(make(m))
                break
    return (start[1] if start else None), steps
