"""An adversarial action corpus: the shapes of model text that have crashed or stalled text envs.

:func:`adversarial_actions` gives a fixed, seeded list of actions up to ``max_chars`` long: repeated openers
(``<tool_call>``, ``<answer>``, ``<think>``, ``\\boxed{``), long separator and whitespace runs, deep nesting, huge
integers, lone surrogates and control characters. The tests replay it on every registered env (no exception, a
bound on the work) and ``benchmarks/fuzz_envs.py`` times it.
"""

from __future__ import annotations

import numpy as np

_OPENERS = ("<tool_call>", "<answer>", "<think>", "\\boxed{", "<search>", "search[", "click[", "####", "{", "[",
            "</answer>", "</tool_call>", "<tool_call>{\"name\": ", "\"")
_FILLERS = (" ", "\n", "a", "1", "[", "]", "{", "}", ", then ", " and then ", ". a", ";", "\ud800", "\x00", "é")


def _repeat(piece: str, max_chars: int, tail: str = "") -> str:
    return piece * max(1, (max_chars - len(tail)) // max(1, len(piece))) + tail


def worst_shapes(max_chars: int = 100_000) -> list[str]:
    """The named worst cases: each was seconds to minutes of one step before the parsers were made linear."""
    n = max_chars
    return [
        _repeat("\\boxed{", n),
        "a" + " " * (n - 3) + "[x",
        "a" + " " * (n - 1),
        _repeat("<answer>", n),
        _repeat("<tool_call>", n),
        _repeat("</answer><tool_call>", n),
        _repeat("<search>", n),
        _repeat("<think>", n),
        _repeat("####", n) + " " * 0,
        "#### " + " " * (n - 5),
        "<tool_call>" + "1" * (n - 24) + "</tool_call>",
        '<tool_call>{"name": "x", "arguments": {"v": ' + "9" * 5000 + "}}</tool_call>",
        "<tool_call>" + "[" * (n - 24) + "</tool_call>",
        "<tool_call>" + "{" * 50_000 + "</tool_call>",
        "search[" + "a\ud800" * 100 + "]",
        "<answer>" + "\ud800" + "</answer>",
        _repeat("a ", n),
        _repeat(" and then", n),
        _repeat(", then", n),
        _repeat("a. ", n),
        _repeat("[", n),
        _repeat("]", n),
        _repeat("{}", n),
        "",
        "\x00" * 100,
    ]


def adversarial_actions(count: int = 200, max_chars: int = 100_000, seed: int = 0) -> list[str]:
    """:func:`worst_shapes`, then ``count`` seeded mixtures of openers and fillers up to ``max_chars``."""
    rng = np.random.default_rng(seed)
    actions = worst_shapes(max_chars)
    for _ in range(count):
        length = int(rng.integers(1, max_chars + 1))
        opener = _OPENERS[int(rng.integers(len(_OPENERS)))]
        filler = _FILLERS[int(rng.integers(len(_FILLERS)))]
        reps = int(rng.integers(1, 64))
        unit = opener + filler * reps
        actions.append(_repeat(unit, length)[:max_chars])
    return actions
