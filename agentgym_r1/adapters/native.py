"""``parser="auto"``: the env reads the model family's own tool calls, chosen from the model's tokenizer.

The reader is transformers' response parsing when the family has a response template with tool calls (the
tokenizer's ``response_template``, or the one TRL pairs with the chat template:
``trl.chat_template_utils.add_response_schema``), else the family's documented format
(:mod:`agentgym_r1.core.native`: Llama 3.1 JSON, Mistral ``[TOOL_CALLS]``, gpt-oss channels, DeepSeek markers), else
Hermes ``<tool_call>`` tags (ChatML families). When the template lists tools itself (``tools=`` in
``apply_chat_template``), the env's system prompt leaves them out and the engine gives them to the template.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_r1.adapters.tokenize import ChatTokenizer, parse_with_template
from agentgym_r1.core.native import FAMILY_READERS, READERS, NativeParser, read_hermes
from agentgym_r1.core.parsers import AnswerFormat, ToolCall

EXAMPLES = {
    "llama3": '{"name": "<function-name>", "parameters": {<arguments>}}',
    "mistral": '[TOOL_CALLS][{"name": "<function-name>", "arguments": {<arguments>}}]',
    "gpt-oss": "<|start|>assistant to=functions.<function-name><|channel|>commentary json<|message|>{<arguments>}",
    "deepseek": (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜><function-name>\n```json\n"
        "{<arguments>}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    ),
    "hermes": '<tool_call>{"name": "<function-name>", "arguments": {<arguments>}}</tool_call>',
}


def native_parser(chat: ChatTokenizer, answer_formats: Sequence[AnswerFormat] = ("tag",)) -> NativeParser:
    """The parser of ``chat``'s family: see the module docstring for which reader it uses."""
    family = chat.family.name
    fields = (chat.response_template or {}).get("fields", {})
    if "tool_calls" in fields:
        reader, example = TemplateReader.of(chat), ""
    else:
        kind = FAMILY_READERS.get(family, "hermes")
        reader, example = READERS[kind][1] if kind != "hermes" else read_hermes, EXAMPLES[kind]
    return NativeParser(
        chat.shape.family, reader, example=example, lists_tools=chat.lists_tools, answer_formats=answer_formats
    )


class TemplateReader:
    """A reader that parses with a family's response template (:func:`parse_with_template`). A class holding plain
    data (not a closure, not the tokenizer), so an env given it pickles cheaply into worker processes
    (``env_backend="process"``) and Ray actors; its ``repr`` names the template, so the engine's env pools key envs
    made with equal readers alike."""

    def __init__(self, name: str, template: dict[str, Any], prefix: str, closings: Sequence[str]) -> None:
        self.name, self.template, self.prefix, self.closings = name, template, prefix, tuple(closings)

    @classmethod
    def of(cls, chat: ChatTokenizer) -> TemplateReader:
        assert chat.response_template is not None
        return cls(chat.shape.family, chat.response_template, chat.shape.generation_prompt, chat.family.end_of_turn)

    def __repr__(self) -> str:
        return f"TemplateReader({self.name!r})"

    def __call__(self, text: str) -> tuple[list[ToolCall], str | None]:
        try:
            parsed = parse_with_template(text, self.template, self.prefix, self.closings)
        except ValueError as e:
            return [], f"the tool call could not be parsed ({str(e).splitlines()[0]})"
        found = parsed.get("tool_calls") or []
        if not isinstance(found, list):
            return [], "the tool calls could not be read as a list of calls"
        calls = []
        for call in found:
            # the template's transform puts whatever JSON the model wrote where the function goes:
            # <tool_call>"str"</tool_call> gives {"function": "str"}, so every level is checked before it is read
            function = (call.get("function") or call) if isinstance(call, dict) else {}
            if not isinstance(function, dict):
                return [], "a tool call must be a JSON object with a function name and its arguments"
            name, args = function.get("name"), function.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except (ValueError, RecursionError):
                    return [], f"the arguments of the call to {name!r} are not valid JSON"
            if not isinstance(name, str) or not name or not isinstance(args, dict):
                return [], "a tool call must have a function name and a JSON object of arguments"
            calls.append(ToolCall(name, args))
        return calls, None


def resolve_env_kwargs(env_kwargs: Mapping[str, Any], chat: ChatTokenizer | None) -> dict[str, Any]:
    """``env_kwargs`` with ``parser="auto"`` replaced by the family's :func:`native_parser` (when ``chat`` is given)."""
    kwargs = dict(env_kwargs)
    if chat is not None and kwargs.get("parser") == "auto":
        kwargs["parser"] = native_parser(chat, tuple(kwargs.get("answer_formats", ("tag",))))
    return kwargs
