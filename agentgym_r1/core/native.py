"""Model families' own tool-call formats, read as the families document them.

* Llama 3.1/3.2: the whole message is one JSON object ``{"name": ..., "parameters": {...}}``, optionally after
  ``<|python_tag|>`` (Meta's prompt format docs; TRL's ``llama3_1.jinja`` renders calls that way).
* Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (v3 tokenizers) or
  ``[TOOL_CALLS]name[ARGS]{...}`` per call (v11 and later), as mistral-common writes them.
* gpt-oss (harmony): ``to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>``, the recipient before or
  after the channel (``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>...``).
* DeepSeek V3/R1: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
  inside ``<｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>`` (TRL's ``deepseekv3.jinja`` renders calls that way).
* Hermes/Qwen: ``<tool_call>{...}</tool_call>`` (:class:`~agentgym_r1.core.parsers.HermesParser`).

:class:`NativeParser` reads one family's format through a reader (one of these, or transformers' response parsing,
which :mod:`agentgym_r1.adapters.native` plugs in from the tokenizer). A malformed call is an invalid action with the
reason; the env answers it with its error observation and format penalty. Each reader scans the text once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentgym_r1.core.parsers import (
    NOTE_ANSWER_WITH_CALL,
    PARSERS,
    ActionParser,
    AnswerFormat,
    ParsedAction,
    ToolCall,
    call_of,
    json_call,
    strip_think,
    tag_spans,
)
from agentgym_r1.error import ConfigError

Reader = Callable[[str], "tuple[list[ToolCall], str | None]"]  # (calls, problem): a problem means a malformed call


def read_hermes(text: str) -> tuple[list[ToolCall], str | None]:
    spans = tag_spans(text, "<tool_call>", "</tool_call>")
    if spans is None:
        return [], "a <tool_call> tag is not closed by </tool_call>"
    return _calls(json_call(body) for _, body in spans)


def read_llama(text: str) -> tuple[list[ToolCall], str | None]:
    body = text.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{") or '"name"' not in body:
        return [], None
    return _calls([json_call(body)])


def read_mistral(text: str) -> tuple[list[ToolCall], str | None]:
    i = text.find("[TOOL_CALLS]")
    if i < 0:
        return [], None
    rest = text[i:].removesuffix("</s>")
    if rest[len("[TOOL_CALLS]") :].lstrip().startswith("["):  # v3: one JSON list
        try:
            items = json.loads(rest[len("[TOOL_CALLS]") :])
        except (ValueError, RecursionError):
            return [], "the [TOOL_CALLS] list is not valid JSON"
        if not isinstance(items, list):
            return [], "[TOOL_CALLS] must be followed by a JSON list of calls"
        return _calls(call_of(item) for item in items)  # not dumped again: a list nested near the limit would raise
    found: list[ToolCall | str] = []
    for part in rest.split("[TOOL_CALLS]")[1:]:  # v11: name[ARGS]{...}
        name, sep, args = part.partition("[ARGS]")
        found.append(_named(name.strip(), args.strip()) if sep else "a [TOOL_CALLS] call has no [ARGS]")
    return _calls(found)


def read_gpt_oss(text: str) -> tuple[list[ToolCall], str | None]:
    found: list[ToolCall | str] = []
    pos = 0
    while (i := text.find("to=functions.", pos)) >= 0:
        start = i + len("to=functions.")
        j = text.find("<|message|>", start)
        if j < 0:
            return [], "a call to=functions.NAME has no <|message|> with its arguments"
        words = text[start:j].split("<|", 1)[0].split()  # empty when a marker follows the dot at once
        name = words[0] if words else ""
        end = text.find("<|call|>", j)
        end = len(text) if end < 0 else end
        found.append(_named(name, text[j + len("<|message|>") : end].strip()))
        pos = end
    return _calls(found)


_DS = ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>")


def read_deepseek(text: str) -> tuple[list[ToolCall], str | None]:
    begin, end, sep = _DS
    spans = tag_spans(text, begin, end)
    if spans is None:
        return [], f"a {begin} is not closed by {end}"
    found: list[ToolCall | str] = []
    for _, body in spans:
        _, has_sep, rest = body.partition(sep)
        name, _, args = rest.partition("\n")
        args = args.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        found.append(_named(name.strip(), args) if has_sep else f"a call has no {sep} before its name")
    return _calls(found)


# marker -> reader, for text whose family is not known (parser="auto" outside the rollout engine)
READERS: dict[str, tuple[str, Reader]] = {
    "hermes": ("<tool_call>", read_hermes),
    "mistral": ("[TOOL_CALLS]", read_mistral),
    "gpt-oss": ("to=functions.", read_gpt_oss),
    "deepseek": (_DS[0], read_deepseek),
    "llama3": ('{"name"', read_llama),
}
FAMILY_READERS = {"llama3": "llama3", "mistral": "mistral", "gpt-oss": "gpt-oss", "deepseek": "deepseek"}


def read_any(text: str) -> tuple[list[ToolCall], str | None]:
    """The calls in whichever documented format the text is written (the first whose marker it holds)."""
    for marker, reader in READERS.values():
        if marker in text:
            return reader(text)
    return [], None


def _named(name: str, args: str) -> ToolCall | str:
    if not name:
        return "a tool call has no function name"
    try:
        value = json.loads(args) if args else {}
    except (ValueError, RecursionError):
        return f"the arguments of the call to {name!r} are not valid JSON"
    return ToolCall(name, value) if isinstance(value, dict) else f"the arguments of {name!r} must be a JSON object"


def _calls(found: Any) -> tuple[list[ToolCall], str | None]:
    calls = []
    for call in found:
        if isinstance(call, str):
            return [], call
        calls.append(call)
    return calls, None


class NativeParser(ActionParser):
    """A model family's own tool calls (read by ``reader``) or ``<answer>...</answer>``.

    ``family`` names the format in messages. ``lists_tools``: the chat template lists the tools itself (its
    ``tools=``), so :meth:`instructions` gives only the answer format; otherwise it lists the schemas and
    ``example``, how one call is written.
    """

    name = "native"

    def __init__(
        self,
        family: str = "any",
        reader: Reader = read_any,
        *,
        example: str = "",
        lists_tools: bool = False,
        answer_formats: Sequence[AnswerFormat] = ("tag",),
    ) -> None:
        super().__init__(answer_formats)
        self.family, self.reader, self.example, self.lists_tools = family, reader, example, lists_tools

    def __repr__(self) -> str:  # stable: the engine's env pools key envs by their kwargs' repr
        reader = getattr(self.reader, "__name__", None) or repr(self.reader)
        return (
            f"NativeParser({self.family!r}, {reader}, lists_tools={self.lists_tools}, "
            f"answer_formats={self.answer_formats})"
        )

    def claims(self, text: str, tools: Mapping[str, Any]) -> bool:
        """Whether ``text`` holds a call in this format, well formed or not (envs that also take plain commands,
        e.g. WebShop and ALFWorld, read the rest as commands)."""
        calls, problem = self.reader(text)
        return bool(calls) or problem is not None

    def parse(self, text: str, tools: Mapping[str, Any]) -> ParsedAction:
        return self._parsed(text, *self.reader(text), tools)

    def parse_claimed(self, text: str, tools: Mapping[str, Any]) -> ParsedAction | None:
        """The parse when the text holds a call in this format, from one reading (:meth:`claims` is the reading)."""
        calls, problem = self.reader(text)
        return self._parsed(text, calls, problem, tools) if calls or problem is not None else None

    def _parsed(self, text: str, calls: list[ToolCall], problem: str | None, tools: Mapping[str, Any]) -> ParsedAction:
        if problem is not None:
            return self.invalid(problem, tools)
        answer = self._answer_or_none(strip_think(text))
        if not calls:
            if answer is not None:
                return ParsedAction("answer", answer=answer[1])
            return self.invalid("no tool call or answer found", tools)
        return ParsedAction("tool_call", calls=calls, note=NOTE_ANSWER_WITH_CALL if answer is not None else None)

    def call_example(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        if not self.example:
            return None
        return self.example.replace("<function-name>", name).replace(
            "{<arguments>}", json.dumps(dict(arguments), ensure_ascii=False)
        )

    def hint(self, tools: Mapping[str, Any]) -> str:
        how = f" as {self.example}" if self.example else f" in your own ({self.family}) tool-call format"
        return f"Call a tool{how} or give the final answer as {self.answer_hint()}."

    def instructions(self, tools: Mapping[str, Any]) -> str:
        answer = f"When you know the final answer, give it as {self.answer_hint()}."
        if self.lists_tools:
            return f"Call the tools listed in your own tool-call format. {answer}"
        schemas = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools.values())
        how = f"Call a tool as {self.example}" if self.example else "Call a tool in your own tool-call format"
        return f"# Tools\n\n<tools>\n{schemas}\n</tools>\n\n{how}. {answer}"


def make_parser(parser: str | ActionParser, answer_formats: Sequence[AnswerFormat] = ("tag",)) -> ActionParser:
    """A parser by name, or ``parser`` itself. ``"auto"``: the model family's own tool-call format; the rollout engine
    puts the family's parser in (:func:`agentgym_r1.adapters.native.native_parser`), and outside it the documented
    formats are read by their markers (:class:`NativeParser`). It lives here, above :mod:`agentgym_r1.core.parsers`
    (which this module imports), so that the parsers need not import this module back."""
    if isinstance(parser, ActionParser):
        return parser
    if parser == "auto":
        return NativeParser(answer_formats=answer_formats)
    if parser not in PARSERS:
        raise ConfigError(
            f"unknown action format {parser!r}; choose one of {[*sorted(PARSERS), 'auto']} or pass an ActionParser"
        )
    return PARSERS[parser](answer_formats=answer_formats)
