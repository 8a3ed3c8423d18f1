"""An adversarial action corpus: the shapes of model text that have crashed or stalled text envs.

:func:`adversarial_actions` gives a fixed, seeded list of actions up to ``max_chars`` long: repeated openers
(``<tool_call>``, ``<answer>``, ``<think>``, ``\\boxed{``), long separator and whitespace runs, deep nesting, huge
integers, lone surrogates and control characters, and :func:`native_shapes`: every model family's own call markers
(unclosed with a long tail, repeated, calls that are no JSON object or have no name), lone surrogates in JSON escapes
and numbers past float range as arguments. The tests replay it on every registered env (no exception, a bound on
the work) and ``benchmarks/fuzz_envs.py`` times it with every parser.
"""

from __future__ import annotations

import numpy as np

_OPENERS = (
    "<tool_call>",
    "<answer>",
    "<think>",
    "\\boxed{",
    "<search>",
    "search[",
    "click[",
    "####",
    "{",
    "[",
    "</answer>",
    "</tool_call>",
    '<tool_call>{"name": ',
    '"',
)
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


# The call markers of every family's format (the documented ones, :mod:`agentgym_r1.core.native`, and those of the
# response templates TRL pairs with the chat templates: Qwen 3.5/3.6, GLM 4, LFM2, Gemma 4, gpt-oss, DeepSeek).
NATIVE_MARKERS = (
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "<|python_tag|>",
    '{"name": ',
    "to=functions.",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|call|>",
    "<|start|>assistant",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<|tool_call>call:",
    "<tool_call|>",
    '<|"|>',
    "<|tool_call_start|>[",
    "<|tool_call_end|>",
    "<function=",
    "<parameter=",
    "</parameter>",
    "</function>",
    "<arg_key>",
    "<arg_value>",
    "</think>",
    "<|channel>thought\n",
    "<channel|>",
    "<|tool_response>",
    "<turn|>",
)

# (tool, argument) of the registered envs' tools, so that a call reaches the tool in each env
_TOOLS = (("act", "command"), ("search", "query"), ("click", "button"), ("calculator", "expression"), ("_echo", "text"))
# hostile argument values, as JSON text: a lone surrogate escaped, numbers past float range, a huge integer
_VALUES = ('"\\ud800"', '"a\\udfff\\ud800b"', "1e999", "-1e999", "1" + "0" * 400, '"' + "\\ud800" * 50 + '"')


def _family_calls(name: str, arg: str, value: str) -> list[str]:
    """One call ``name(arg=value)`` in each family's format (``value`` is JSON text)."""
    args = f'{{"{arg}": {value}}}'
    return [
        f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>',
        f'{{"name": "{name}", "parameters": {args}}}',
        f'[TOOL_CALLS][{{"name": "{name}", "arguments": {args}}}]',
        f"[TOOL_CALLS]{name}[ARGS]{args}",
        f"<|start|>assistant to=functions.{name}<|channel|>commentary json<|message|>{args}<|call|>",
        f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        f'<|tool_call>call:{name}{{{arg}:<|"|>{value}<|"|>}}<tool_call|>',
        f"<tool_call>\n<function={name}>\n<parameter={arg}>\n{value}\n</parameter>\n</function>\n</tool_call>",
        f"<tool_call>{name}\n<arg_key>{arg}</arg_key>\n<arg_value>{value}</arg_value>\n</tool_call>",
        f"<|tool_call_start|>[{name}({arg}={value})]<|tool_call_end|>",
    ]


def native_shapes(max_chars: int = 100_000) -> list[str]:
    """Every family's markers as hostile text: calls that are no JSON object or name no function, hostile values in
    each format's call to each env's tool, and each marker unclosed with a tail to ``max_chars`` or repeated."""
    shapes = [
        "to=functions.<|channel|>commentary json<|message|>{}<|call|>",
        "to=functions. <|message|>{}",
        "[TOOL_CALLS][ARGS]{}",
        '[TOOL_CALLS][1, "a", null]',
        "<|tool_call>call:<tool_call|>",
    ]
    shapes += [
        f"<tool_call>{v}</tool_call>"
        for v in (
            '"str"',
            "true",
            "1e999",
            "null",
            "[]",
            "0",
            '{"name": 1}',
            '{"function": "x"}',
            '{"name": "act", "arguments": 1e999}',
        )
    ]
    shapes += [call for name, arg in _TOOLS for value in _VALUES for call in _family_calls(name, arg, value)]
    for marker in NATIVE_MARKERS:
        shapes.append(marker + '{"name": "act", "arguments": ' + "a" * max(0, max_chars - len(marker) - 30))
        shapes.append(_repeat(marker, max_chars))
    shapes.append('<|tool_call>call:act{command:<|"|>look' + "a" * max(0, max_chars - 40))  # Gemma 4's slowest
    return [s[:max_chars] for s in shapes]


def adversarial_actions(count: int = 200, max_chars: int = 100_000, seed: int = 0) -> list[str]:
    """:func:`worst_shapes` and :func:`native_shapes`, then ``count`` seeded mixtures of openers (the families'
    markers among them) and fillers up to ``max_chars``."""
    rng = np.random.default_rng(seed)
    actions = worst_shapes(max_chars) + native_shapes(max_chars)
    openers = _OPENERS + NATIVE_MARKERS
    for _ in range(count):
        length = int(rng.integers(1, max_chars + 1))
        opener = openers[int(rng.integers(len(openers)))]
        filler = _FILLERS[int(rng.integers(len(_FILLERS)))]
        reps = int(rng.integers(1, 64))
        unit = opener + filler * reps
        actions.append(_repeat(unit, length)[:max_chars])
    return actions
