"""Tool-call formats: parse a model's action text into tool calls, an answer or a command.

Three formats, chosen per env:

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

from agentgym_r1.error import ConfigError

Kind = Literal["tool_call", "answer", "command", "invalid"]
AnswerFormat = Literal["tag", "hashes", "boxed"]

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
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

    def to_info(self) -> dict[str, Any]:
        if self.kind == "tool_call":
            return {"kind": "tool_call", "calls": [{"name": c.name, "arguments": c.arguments} for c in self.calls]}
        if self.kind == "answer":
            return {"kind": "answer", "answer": self.answer}
        if self.kind == "command":
            return {"kind": "command", "verb": self.verb, "arg": self.arg}
        return {"kind": "invalid", "error": self.error}


def _boxed(text: str) -> tuple[int, str] | None:
    """The content of the last ``\\boxed{...}``, braces balanced."""
    found = None
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = (m.start(), text[m.end() : i - 1])
    return found


def find_answer(text: str, formats: Sequence[AnswerFormat]) -> tuple[int, str] | None:
    """``(position, answer)`` of the first answer in ``text`` in any of ``formats``, or ``None``."""
    best: tuple[int, str] | None = None
    for fmt in formats:
        hit = None
        if fmt == "tag":
            if "<answer>" in text and (m := _ANSWER_TAG.search(text)):
                hit = (m.start(), m.group(1))
        elif fmt == "hashes":
            if "####" in text and (m := _HASHES.search(text)):
                hit = (m.start(), m.group(1))
        elif "\\boxed" in text:
            hit = _boxed(text)
        if hit is not None and (best is None or hit[0] < best[0]):
            best = hit
    return None if best is None else (best[0], best[1].strip())


class ActionParser:
    """Base class. ``parse(text, tools)`` returns a :class:`ParsedAction`; ``instructions(tools)`` tells the model."""

    name: str = ""

    def __init__(self, answer_formats: Sequence[AnswerFormat] = ("tag",)) -> None:
        bad = [f for f in answer_formats if f not in ("tag", "hashes", "boxed")]
        if bad:
            raise ConfigError(f"unknown answer formats {bad}; choose from 'tag', 'hashes', 'boxed'")
        self.answer_formats = tuple(answer_formats)

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        raise NotImplementedError

    def instructions(self, tools: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def answer_hint(self) -> str:
        return "<answer>...</answer>"

    def render_result(self, name: str, text: str) -> str:
        """How a tool's result is written into the observation (and the transcript)."""
        return text

    def _answer_or_none(self, text: str) -> tuple[int, str] | None:
        return find_answer(text, self.answer_formats) if self.answer_formats else None


class HermesParser(ActionParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (one or more) or ``<answer>...</answer>``."""

    name = "hermes"
    _CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        if "<think>" in text:
            text = _THINK.sub("", text)
        answer = self._answer_or_none(text)
        first_call = text.find("<tool_call>")
        if answer is not None and (first_call < 0 or answer[0] < first_call):
            return ParsedAction("answer", answer=answer[1])
        if first_call < 0:
            return ParsedAction("invalid", error=self._expected("no tool call or answer found"))
        bodies = self._CALL.findall(text)
        if text.count("<tool_call>") != len(bodies):
            return ParsedAction("invalid", error=self._expected("a <tool_call> tag is not closed by </tool_call>"))
        calls = []
        for body in bodies:
            call = _json_call(body)
            if isinstance(call, str):
                return ParsedAction("invalid", error=self._expected(call))
            calls.append(call)
        return ParsedAction("tool_call", calls=calls)

    def render_result(self, name: str, text: str) -> str:
        return f"<tool_response>\n{text}\n</tool_response>"

    def _expected(self, problem: str) -> str:
        return (f"Invalid action: {problem}. Call a tool as <tool_call>{{\"name\": \"...\", \"arguments\": {{...}}}}"
                f"</tool_call> or give the final answer as {self.answer_hint()}.")

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


def _json_call(body: str) -> ToolCall | str:
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        return f"the tool call is not valid JSON ({msg})"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return 'the tool call must be a JSON object with a string "name" and an "arguments" object'
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
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

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        if "<think>" in text:
            text = _THINK.sub("", text)
        answer = self._answer_or_none(text)
        calls: list[tuple[int, ToolCall]] = []
        for tool_name, tool_ in tools.items():
            opened = text.count(f"<{tool_name}>")
            if not opened:
                continue
            found = list(re.finditer(rf"<{re.escape(tool_name)}>(.*?)</{re.escape(tool_name)}>", text, re.S))
            if len(found) != opened:
                return ParsedAction("invalid", error=self._expected(f"a <{tool_name}> tag is not closed", tools))
            key = primary_argument(tool_)
            for m in found:
                calls.append((m.start(), ToolCall(tool_name, {key: m.group(1).strip()} if key else {})))
        calls.sort(key=lambda c: c[0])
        if answer is not None and (not calls or answer[0] < calls[0][0]):
            return ParsedAction("answer", answer=answer[1])
        if not calls:
            problem = "an <answer> tag is not closed" if "<answer>" in text else "no tool tag or answer found"
            return ParsedAction("invalid", error=self._expected(problem, tools))
        return ParsedAction("tool_call", calls=[c for _, c in calls])

    def render_result(self, name: str, text: str) -> str:
        return f"\n\n<information>{text}</information>\n\n"

    def _expected(self, problem: str, tools: Mapping[str, Any]) -> str:
        tags = ", ".join(f"<{n}>...</{n}>" for n in tools)
        return f"Invalid action: {problem}. Use {tags} or give the final answer as {self.answer_hint()}."

    def instructions(self, tools: Mapping[str, Any]) -> str:
        lines = [f"- <{n}>{primary_argument(t) or ''}</{n}>: {t.description}" for n, t in tools.items()]
        return ("You can use these tools by writing the tag with its argument; the result comes back in the next "
                "message:\n" + "\n".join(lines) + f"\nWhen you know the final answer, give it as {self.answer_hint()}.")


class CommandParser(ActionParser):
    """``verb[argument]``: one command per action; ``answer[...]`` gives the final answer."""

    name = "command"
    _COMMAND = re.compile(r"\s*([A-Za-z_][\w\- ]*?)\s*\[(.*)\]\s*", re.S)

    def __init__(self, answer_formats: Sequence[AnswerFormat] = ("tag",), answer_verb: str | None = "answer") -> None:
        super().__init__(answer_formats)
        self.answer_verb = answer_verb

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        if "<think>" in text:
            text = _THINK.sub("", text)
        m = self._COMMAND.fullmatch(text)
        if m is None:
            answer = self._answer_or_none(text)
            if answer is not None:
                return ParsedAction("answer", answer=answer[1])
            return ParsedAction("invalid", error=self._expected(text))
        verb, arg = m.group(1).strip().lower(), m.group(2).strip()
        if self.answer_verb is not None and verb == self.answer_verb:
            return ParsedAction("answer", answer=arg)
        return ParsedAction("command", verb=verb, arg=arg)

    def _expected(self, text: str) -> str:
        if not text.strip():
            problem = "the action is empty"
        elif "[" not in text or "]" not in text:
            problem = "no command in the form verb[argument] found"
        else:
            problem = "the brackets are malformed; write exactly one verb[argument]"
        return f"Invalid action: {problem}. Write one command such as search[query], or answer[...] to finish."

    def answer_hint(self) -> str:
        return f"{self.answer_verb}[...]" if self.answer_verb else super().answer_hint()

    def instructions(self, tools: Mapping[str, Any]) -> str:
        lines = [f"- {n}[{primary_argument(t) or ''}]: {t.description}" for n, t in tools.items()]
        return ("Act with one command per message, written as verb[argument]:\n" + "\n".join(lines)
                + f"\nWhen you know the final answer, give it as {self.answer_hint()}.")


PARSERS: dict[str, type[ActionParser]] = {"hermes": HermesParser, "tag": TagParser, "command": CommandParser}


def make_parser(parser: str | ActionParser, answer_formats: Sequence[AnswerFormat] = ("tag",)) -> ActionParser:
    if isinstance(parser, ActionParser):
        return parser
    if parser not in PARSERS:
        raise ConfigError(f"unknown action format {parser!r}; choose one of {sorted(PARSERS)} or pass an ActionParser")
    return PARSERS[parser](answer_formats=answer_formats)
