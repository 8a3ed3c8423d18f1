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

from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.core.native import FAMILY_READERS, READERS, NativeParser, read_hermes
from agentgym_r1.core.parsers import AnswerFormat, ToolCall

EXAMPLES = {
    "llama3": '{"name": "<function-name>", "parameters": {<arguments>}}',
    "mistral": '[TOOL_CALLS][{"name": "<function-name>", "arguments": {<arguments>}}]',
    "gpt-oss": "<|start|>assistant to=functions.<function-name><|channel|>commentary json<|message|>{<arguments>}",
    "deepseek": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜><function-name>\n```json\n"
                 "{<arguments>}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "hermes": '<tool_call>{"name": "<function-name>", "arguments": {<arguments>}}</tool_call>',
}


def native_parser(chat: ChatTokenizer, answer_formats: Sequence[AnswerFormat] = ("tag",)) -> NativeParser:
    """The parser of ``chat``'s family: see the module docstring for which reader it uses."""
    family = chat.family.name
    fields = (chat.response_template or {}).get("fields", {})
    if "tool_calls" in fields:
        reader, example = TemplateReader(chat), ""
    else:
        kind = FAMILY_READERS.get(family, "hermes")
        reader, example = READERS[kind][1] if kind != "hermes" else read_hermes, EXAMPLES[kind]
    return NativeParser(chat.shape.family, reader, example=example, lists_tools=chat.lists_tools,
                        answer_formats=answer_formats)


class TemplateReader:
    """A reader that parses with the family's response template (:meth:`ChatTokenizer.parse_response`). A class,
    not a closure, so that an env holding it pickles into worker processes (``env_backend="process"``)."""

    def __init__(self, chat: ChatTokenizer) -> None:
        self.chat = chat

    def __call__(self, text: str) -> tuple[list[ToolCall], str | None]:
        try:
            parsed = self.chat.parse_response(text)
        except ValueError as e:
            return [], f"the tool call could not be parsed ({str(e).splitlines()[0]})"
        calls = []
        for call in parsed.get("tool_calls") or []:
            function = (call.get("function") or call) if isinstance(call, dict) else {}
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
        kwargs["parser"] = native_parser(chat, kwargs.get("answer_formats", ("tag",)))
    return kwargs
