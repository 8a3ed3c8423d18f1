"""Tool-call formats: parse a model's action text into tool calls, an answer or a command.

Three formats, chosen per env (and :class:`CompositeParser` for envs that read several):

* :class:`HermesParser` (default): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several per action
  allowed, as Hermes and Qwen models write them.
* :class:`TagParser`: ``<search>query</search>`` for each tool, as Search-R1 writes it.
* :class:`CommandParser`: ``verb[argument]``, as WebShop and ReAct write it.

All three also read the final answer, ``<answer>...</answer>`` by default (``answer[...]`` for commands), and can read
``#### n`` and ``\\boxed{n}`` when asked. ``<think>...</think>`` blocks are ignored. A parser never raises: text it
cannot read becomes an ``invalid`` action with a message saying what was wrong and what is expected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agentgym_r1.error import ConfigError

Kind = Literal["tool_call", "answer", "command", "invalid"]
AnswerFormat = Literal["tag", "hashes", "boxed"]

_HASHES = re.compile(r"####\s*([^\n]+)")
_BOXED = re.compile(r"\\boxed\s*\{")


@dataclass(slots=True)
class ToolCall:
    name: str
    arguments: Any


@dataclass(slots=True)
class ParsedAction:
    """The parse of one action. ``kind`` decides which other fields are set."""

    kind: Kind
    calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    verb: str | None = None
    arg: str | None = None
    error: str | None = None
    problem: str | None = None
    note: str | None = None

    def to_info(self) -> dict[str, Any]:
        if self.kind == "tool_call":
            return {"kind": "tool_call", "calls": [{"name": c.name, "arguments": c.arguments} for c in self.calls]}
        if self.kind == "answer":
            return {"kind": "answer", "answer": self.answer}
        if self.kind == "command":
            return {"kind": "command", "verb": self.verb, "arg": self.arg}
        return {"kind": "invalid", "error": self.error}


def strip_think(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks (an unclosed one runs to the end); one pass."""
    if "<think>" not in text:
        return text
    out, pos = [], 0
    while (i := text.find("<think>", pos)) >= 0:
        out.append(text[pos:i])
        j = text.find("</think>", i + 7)
        if j < 0:
            return "".join(out)
        pos = j + 8
    out.append(text[pos:])
    return "".join(out)


def tag_spans(text: str, open_: str, close: str) -> list[tuple[int, str]] | None:
    """``(start, body)`` of each ``open_ body close`` in order, or ``None`` when an opener is not closed (or a body
    holds another opener). One left-to-right pass: every character is looked at a bounded number of times, so the
    work is linear in ``len(text)`` whatever the model wrote (a lazy ``open(.*?)close`` regex is quadratic on
    thousands of unclosed openers)."""
    spans, pos = [], 0
    while (i := text.find(open_, pos)) >= 0:
        j = text.find(close, i + len(open_))
        if j < 0:
            return None
        body = text[i + len(open_) : j]
        if open_ in body:
            return None
        spans.append((i, body))
        pos = j + len(close)
    return spans


def _boxed(text: str) -> tuple[int, str] | None:
    """The content of the last ``\\boxed{...}`` whose braces balance (as scanning on from its ``{`` would find).

    Linear and vectorised: ``depth`` is the running brace count; the ``{`` of a ``\\boxed`` is closed where the depth
    first falls back below it, which a suffix minimum tells at once for every candidate (scanning on from each of
    thousands of unclosed ``\\boxed{`` was quadratic: minutes for one action)."""
    spans = np.array([(m.start(), m.end()) for m in _BOXED.finditer(text)], dtype=np.int64).reshape(-1, 2)
    if not len(spans):
        return None
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    depth = np.cumsum((codes == ord("{")).astype(np.int64) - (codes == ord("}")))
    suffix_min = np.append(np.minimum.accumulate(depth[::-1])[::-1], np.iinfo(np.int64).max)
    bases = depth[spans[:, 1] - 1] - 1  # the depth before each \boxed's "{"
    closed = np.flatnonzero(suffix_min[spans[:, 1]] <= bases)
    if not len(closed):
        return None
    start, end = (int(x) for x in spans[closed[-1]])
    close = end + int(np.argmax(depth[end:] <= bases[closed[-1]]))
    return start, text[end:close]


def find_answer(text: str, formats: Sequence[AnswerFormat]) -> tuple[int, str] | None:
    """``(position, answer)`` of the first answer in ``text`` in any of ``formats``, or ``None``."""
    best: tuple[int, str] | None = None
    for fmt in formats:
        hit = None
        if fmt == "tag":
            if (i := text.find("<answer>")) >= 0 and (j := text.find("</answer>", i + 8)) >= 0:
                hit = (i, text[i + 8 : j])
        elif fmt == "hashes":
            if "####" in text and (m := _HASHES.search(text)):
                hit = (m.start(), m.group(1))
        elif "\\boxed" in text:
            hit = _boxed(text)
        if hit is not None and (best is None or hit[0] < best[0]):
            best = hit
    return None if best is None else (best[0], best[1].strip())


class ActionParser:
    """Base class. ``parse(text, tools)`` returns a :class:`ParsedAction`; ``instructions(tools)`` tells the model.

    Every parser reads the text in a bounded number of linear passes (``str.find`` and anchored or unambiguous
    regexes), so parsing any action up to the action limit takes milliseconds.
    """

    name: str = ""

    def __init__(self, answer_formats: Sequence[AnswerFormat] = ("tag",)) -> None:
        bad = [f for f in answer_formats if f not in ("tag", "hashes", "boxed")]
        if bad:
            raise ConfigError(f"unknown answer formats {bad}; choose from 'tag', 'hashes', 'boxed'")
        self.answer_formats = tuple(answer_formats)

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        raise NotImplementedError

    def claims(self, text: str, tools: Mapping[str, Any]) -> bool:
        """Whether ``text`` is written in this format (for :class:`CompositeParser`); a cheap linear check."""
        return True

    def parse_claimed(self, text: str, tools: Mapping[str, Any]) -> ParsedAction | None:
        """The parse of ``text`` when this format :meth:`claims` it, else ``None``: what an env that reads several
        formats calls, so that a parser whose check is the parse itself (a model family's reader) reads the text
        once per step. Override it when :meth:`claims` is not a cheap check."""
        return self.parse(text, tools) if self.claims(text, tools) else None

    def instructions(self, tools: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def answer_hint(self) -> str:
        return "<answer>...</answer>"

    def render_result(self, name: str, text: str) -> str:
        """How a tool's result is written into the observation (and the transcript)."""
        return text

    def call_example(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """How one call to ``name`` with ``arguments`` is written in this format (for envs' prompts); ``None`` when
        the format has no fixed written form here."""
        return None

    def invalid(self, problem: str, tools: Mapping[str, Any]) -> ParsedAction:
        """An invalid action: ``problem`` (what was wrong) and the full message with what is expected."""
        return ParsedAction("invalid", error=f"Invalid action: {problem}. {self.hint(tools)}", problem=problem)

    def hint(self, tools: Mapping[str, Any]) -> str:
        """What a valid action looks like, ending the message of an invalid one."""
        return f"Give the final answer as {self.answer_hint()}."

    def _answer_or_none(self, text: str) -> tuple[int, str] | None:
        return find_answer(text, self.answer_formats) if self.answer_formats else None


NOTE_CALL_AFTER_ANSWER = "The answer ends the episode; the tool call written after it was not run."
NOTE_ANSWER_WITH_CALL = (
    "Note: the answer written with this tool call was ignored. Read the results, then answer in a separate action."
)


def _with_answer(answer: tuple[int, str] | None, first_call: int) -> ParsedAction | None:
    """The answer when it comes before any call (noting calls written after it), else ``None``."""
    if answer is not None and (first_call < 0 or answer[0] < first_call):
        return ParsedAction("answer", answer=answer[1], note=NOTE_CALL_AFTER_ANSWER if first_call >= 0 else None)
    return None


class HermesParser(ActionParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (one or more) or ``<answer>...</answer>``."""

    name = "hermes"

    def claims(self, text: str, tools: Mapping[str, Any]) -> bool:
        return "<tool_call>" in text

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        text = strip_think(text)
        answer = self._answer_or_none(text)
        first_call = text.find("<tool_call>")
        if (done := _with_answer(answer, first_call)) is not None:
            return done
        if first_call < 0:
            return self.invalid("no tool call or answer found", tools)
        spans = tag_spans(text, "<tool_call>", "</tool_call>")
        if spans is None:
            return self.invalid("a <tool_call> tag is not closed by </tool_call>", tools)
        calls = []
        for _, body in spans:
            call = json_call(body)
            if isinstance(call, str):
                return self.invalid(call, tools)
            calls.append(call)
        return ParsedAction(
            "tool_call", calls=calls, note=NOTE_ANSWER_WITH_CALL if self.answer_formats and "<answer>" in text else None
        )

    def render_result(self, name: str, text: str) -> str:
        return f"<tool_response>\n{text}\n</tool_response>"

    def call_example(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        return f"<tool_call>{json.dumps({'name': name, 'arguments': dict(arguments)}, ensure_ascii=False)}</tool_call>"

    def hint(self, tools: Mapping[str, Any]) -> str:
        return (
            f'Call a tool as <tool_call>{{"name": "...", "arguments": {{...}}}}</tool_call> or give the '
            f"final answer as {self.answer_hint()}."
        )

    def instructions(self, tools: Mapping[str, Any]) -> str:
        schemas = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools.values())
        return (
            "# Tools\n\nYou may call one or more functions to assist with the task.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{schemas}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\n'
            f"When you know the final answer, give it as {self.answer_hint()}."
        )


def json_call(body: str) -> ToolCall | str:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as e:
        # JSONDecodeError is a ValueError; so is int()'s "Exceeds the limit (4300 digits)" for a huge integer
        msg = (
            e.msg
            if isinstance(e, json.JSONDecodeError)
            else "nested too deeply"
            if isinstance(e, RecursionError)
            else "a number is too long"
        )
        return f"the tool call is not valid JSON ({msg})"
    return call_of(obj)


def call_of(obj: Any) -> ToolCall | str:
    """The call a decoded JSON value describes (``{"name": ..., "arguments": {...}}``), or what is wrong with it."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return 'the tool call must be a JSON object with a string "name" and an "arguments" object'
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return '"arguments" must be a JSON object'
    if not isinstance(args, dict):
        return '"arguments" must be a JSON object'
    return ToolCall(obj["name"], args)


def primary_argument(tool_: Any) -> str | None:
    """The argument a tag or a command fills: the first required property (else the first property)."""
    params = tool_.parameters
    required = params.get("required") or list(params.get("properties", {}))
    return required[0] if required else None


class TagParser(ActionParser):
    """``<tool>argument</tool>`` for each tool (Search-R1's ``<search>query</search>``) or ``<answer>...</answer>``."""

    name = "tag"

    def claims(self, text: str, tools: Mapping[str, Any]) -> bool:
        return any(f"<{n}>" in text for n in tools)

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        text = strip_think(text)
        answer = self._answer_or_none(text)
        calls: list[tuple[int, ToolCall]] = []
        for tool_name, tool_ in tools.items():
            spans = tag_spans(text, f"<{tool_name}>", f"</{tool_name}>")
            if spans is None:
                return self.invalid(f"a <{tool_name}> tag is not closed", tools)
            key = primary_argument(tool_)
            calls.extend((i, ToolCall(tool_name, {key: body.strip()} if key else {})) for i, body in spans)
        calls.sort(key=lambda c: c[0])
        if (done := _with_answer(answer, calls[0][0] if calls else -1)) is not None:
            return done
        if not calls:
            problem = "an <answer> tag is not closed" if "<answer>" in text else "no tool tag or answer found"
            return self.invalid(problem, tools)
        return ParsedAction(
            "tool_call",
            calls=[c for _, c in calls],
            note=NOTE_ANSWER_WITH_CALL if self.answer_formats and "<answer>" in text else None,
        )

    def render_result(self, name: str, text: str) -> str:
        return f"\n\n<information>{text}</information>\n\n"

    def hint(self, tools: Mapping[str, Any]) -> str:
        tags = ", ".join(f"<{n}>...</{n}>" for n in tools)
        return f"Use {tags} or give the final answer as {self.answer_hint()}."

    def instructions(self, tools: Mapping[str, Any]) -> str:
        lines = [f"- <{n}>{primary_argument(t) or ''}</{n}>: {t.description}" for n, t in tools.items()]
        return (
            "You can use these tools by writing the tag with its argument; the result comes back in the next "
            "message:\n" + "\n".join(lines) + f"\nWhen you know the final answer, give it as {self.answer_hint()}."
        )


_VERB = re.compile(r"[A-Za-z_][\w\- ]*")


def read_command(text: str) -> tuple[str, str] | None:
    """``(verb, argument)`` of ``verb[argument]`` (the argument runs from the first ``[`` to the last ``]``), or
    ``None``. Linear: a strip, one ``find`` and one unambiguous ``fullmatch``; the regex it replaces
    (``\\s*(verb*?)\\s*\\[...``) backtracked quadratically on a word followed by thousands of spaces."""
    text = text.strip()
    i = text.find("[")
    if i < 0 or not text.endswith("]") or len(text) < 2:
        return None
    verb = text[:i].rstrip()
    if not _VERB.fullmatch(verb):
        return None
    return verb.strip(), text[i + 1 : -1]


class CommandParser(ActionParser):
    """``verb[argument]``: one command per action; ``answer[...]`` gives the final answer."""

    name = "command"

    def __init__(self, answer_formats: Sequence[AnswerFormat] = ("tag",), answer_verb: str | None = "answer") -> None:
        super().__init__(answer_formats)
        self.answer_verb = answer_verb

    def claims(self, text: str, tools: Mapping[str, Any]) -> bool:
        return "[" in text

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        text = strip_think(text)
        command = read_command(text)
        if command is None:
            answer = self._answer_or_none(text)
            if answer is not None:
                return ParsedAction("answer", answer=answer[1])
            return self.invalid(self._problem(text), tools)
        verb, arg = command[0].lower(), command[1].strip()
        if self.answer_verb is not None and verb == self.answer_verb:
            return ParsedAction("answer", answer=arg)
        return ParsedAction("command", verb=verb, arg=arg)

    @staticmethod
    def _problem(text: str) -> str:
        if not text.strip():
            return "the action is empty"
        if "[" not in text or "]" not in text:
            return "no command in the form verb[argument] found"
        return "the brackets are malformed; write exactly one verb[argument]"

    def hint(self, tools: Mapping[str, Any]) -> str:
        finish = f", or {self.answer_hint()} to finish" if self.answer_verb else ""
        return f"Write one command such as search[query]{finish}."

    def answer_hint(self) -> str:
        return f"{self.answer_verb}[...]" if self.answer_verb else super().answer_hint()

    def instructions(self, tools: Mapping[str, Any]) -> str:
        lines = [f"- {n}[{primary_argument(t) or ''}]: {t.description}" for n, t in tools.items()]
        return (
            "Act with one command per message, written as verb[argument]:\n"
            + "\n".join(lines)
            + f"\nWhen you know the final answer, give it as {self.answer_hint()}."
        )


class CompositeParser(ActionParser):
    """Several formats in one env, e.g. Hermes tool calls, then ``verb[argument]`` commands (WebShop).

    The first parser that claims the text parses it (the last one when none does), each asked through
    :meth:`~ActionParser.parse_claimed`, so the text is read once; an invalid action's message ends with this
    parser's own ``hint`` instead of the inner parser's.
    """

    name = "composite"

    def __init__(self, parsers: Sequence[ActionParser], hint: str) -> None:
        if not parsers:
            raise ConfigError("CompositeParser needs at least one parser, e.g. [HermesParser(), CommandParser()]")
        super().__init__(())
        self.parsers, self._hint = tuple(parsers), hint

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        for inner in self.parsers[:-1]:
            if (parsed := inner.parse_claimed(text, tools)) is not None:
                break
        else:
            parsed = self.parsers[-1].parse(text, tools)
        if parsed.kind == "invalid" and parsed.problem is not None:
            return self.invalid(parsed.problem, tools)
        return parsed

    def hint(self, tools: Mapping[str, Any]) -> str:
        return self._hint

    def instructions(self, tools: Mapping[str, Any]) -> str:
        return self._hint


def with_call_example(text: str, parser: ActionParser, name: str, arguments: Mapping[str, Any]) -> str:
    """``text`` (an env's prompt written with Hermes calls) with its Hermes call to ``name`` written in ``parser``'s
    format instead, or, for a format with no fixed written form, "in your own tool-call format"."""
    hermes = f" as {HermesParser(()).call_example(name, arguments)}"
    example = parser.call_example(name, arguments)
    return text.replace(hermes, f" as {example}" if example else " in your own tool-call format")


PARSERS: dict[str, type[ActionParser]] = {"hermes": HermesParser, "tag": TagParser, "command": CommandParser}
