"""Episode tokenization: chat-template rendering of environment text, and exact agent token ids.

The rule (DESIGN.md section 1): agent tokens are the ids the sampler produced, kept as they are, the end-of-turn
token the model emitted included; environment text is rendered through the model's chat template *as a suffix* and
tokenized once. Nothing is decoded and re-encoded.

The suffix after an agent turn is found by rendering the conversation twice and taking the difference::

    render(history[:-1] + [assistant: SENTINEL] + env_messages, add_generation_prompt=True)
                                      ^ everything after the sentinel is the suffix text

It holds the template's closing of the assistant turn (``<|im_end|>\\n`` for Qwen), the env messages in the
template's own form (Qwen2.5 groups consecutive tool results in one user turn with ``<tool_response>`` tags) and the
opening of the next assistant turn. When the model itself ended its turn with an end-of-turn token whose text starts
the closing, that text is not rendered again: the sampled token already stands for it. When generation stopped on a
stop string (``</tool_call>``) instead, the closing is template scaffolding and gets mask 0 like the rest.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

from agentgym_r1.adapters.families import (
    UNKNOWN,
    Family,
    describe,
    detect_family,
    template_name,
    trl_template,
)
from agentgym_r1.adapters.shape import probe
from agentgym_r1.error import ConfigError, TemplateUnsupportedError

Message = dict[str, Any]

_SENTINEL = "\x00agentgym-r1-turn-end\x00"


class ChatTokenizer:
    """A tokenizer and its chat template, as the rollout engine needs them.

    ``tokenizer`` is a Hugging Face tokenizer (anything with ``apply_chat_template``, ``__call__`` and ``decode``).
    ``stop_token_ids`` are the end-of-turn ids that end a generation (default: the tokenizer's eos ids and the
    end-of-turn tokens of the template's family, :mod:`agentgym_r1.adapters.families`). ``tools`` is passed to the
    template when given (most envs already describe their tools in the system prompt, so the default is none).

    The template is probed once here (:mod:`agentgym_r1.adapters.shape`): env messages are rewritten to what it
    accepts (system folded into the first user message, tool results as user messages, env messages merged, assistant
    messages rebuilt with their parsed ``tool_calls``), and a template that cannot serve an episode raises
    :class:`~agentgym_r1.error.TemplateUnsupportedError` naming its family and what is missing.
    """

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None,
                 stop_token_ids: Sequence[int] | None = None, tools: list[dict[str, Any]] | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
        if not template:
            raise ConfigError(f"the tokenizer {type(tokenizer).__name__} has no chat template; pass chat_template=")
        template_text = template if isinstance(template, str) else str(template.get("default", template))
        self.family = detect_family(template_text)
        self.tools = tools
        self.stop_token_ids = frozenset(default_stop_ids(tokenizer, self.family) if stop_token_ids is None
                                        else stop_token_ids)
        if not self.stop_token_ids:
            raise ConfigError("no stop token ids: the tokenizer has no eos token; pass stop_token_ids=")
        self._stop_text = {i: tokenizer.decode([i], skip_special_tokens=False) for i in self.stop_token_ids}
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id: int = pad if pad is not None else min(self.stop_token_ids)
        self.response_template = response_template(tokenizer, template_text)
        self.shape = probe(lambda m, g: self._apply(m, g, self.tools), describe(template_text))
        self.lists_tools = self._lists_tools()
        if self.shape.tool_role == "call" and self.response_template is None:
            raise TemplateUnsupportedError(
                f"the chat template of family {self.shape.family} renders a tool result only after an assistant "
                "message with structured tool_calls, and the tokenizer has no response_template to parse them from the "
                "model's text; set tokenizer.response_template (see transformers' response parsing docs)")

    def _lists_tools(self) -> bool:
        """Whether the template writes the tools given as ``tools=`` (the probe tool's name shows in the prompt)."""
        schema = {"type": "function", "function": {"name": "agentgymprobetool", "description": "probe",
                                                   "parameters": {"type": "object", "properties": {}}}}
        try:
            return "agentgymprobetool" in self._apply([{"role": "user", "content": "q"}], True, [schema])
        except Exception:  # a template that refuses tools= cannot list them
            return False

    def _apply(self, messages: list[Message], add_generation_prompt: bool, tools: list[dict[str, Any]] | None) -> str:
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        if tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def render(self, messages: Sequence[Message], add_generation_prompt: bool,
               tools: list[dict[str, Any]] | None = None) -> str:
        """``messages`` rendered through the template, rewritten first to the shape it accepts. The tools go to the
        template from ``tools``, else :attr:`tools`, else the first message's ``"tools"`` (an env whose parser leaves
        listing the tools to the template puts them there)."""
        listed = messages[0].get("tools") if messages else None
        return self._apply(self.prepare(messages), add_generation_prompt, tools or self.tools or listed)

    def prepare(self, messages: Sequence[Message]) -> list[Message]:
        """The messages as the template is given them (:meth:`TemplateShape.prepare`)."""
        bare = [{k: v for k, v in m.items() if k != "tools"} for m in messages]
        return self.shape.prepare(bare, self.structure if self.response_template is not None else None)

    def parse_response(self, text: str) -> Message:
        """The model's text parsed by the family's response template (transformers' ``parse_response``, the
        generation prompt as its prefix). The text the env gets lacks the turn's final end-of-turn token, which
        some templates close a call with (Llama's ``}<|eot_id|>``): when the text alone does not parse, each of the
        family's end-of-turn tokens is tried after it. Raises ``ValueError`` for
        a call the template cannot read, ``ConfigError`` when the family has no response template."""
        if self.response_template is None:
            raise ConfigError(f"the tokenizer of family {self.family.name} has no response_template to parse with")
        return parse_with_template(text, self.response_template, self.shape.generation_prompt,
                                   self.family.end_of_turn)

    def structure(self, text: str) -> Message:
        """An assistant message rebuilt from the model's text by :meth:`parse_response` (content normalised and a
        failed parse kept as text, as TRL's ``chat_template_utils.parse_response`` does)."""
        try:
            parsed = self.parse_response(text)
        except ValueError:
            parsed = {}
        parsed["role"] = "assistant"
        calls = [c for c in parsed.get("tool_calls") or [] if isinstance(c, dict)
                 and isinstance((c.get("function") or c).get("name"), str)]
        if calls:
            parsed["tool_calls"] = calls
        else:
            parsed.pop("tool_calls", None)
        if not parsed.get("content"):
            parsed["content"] = "" if calls or parsed.get("thinking") else self._plain(text)
        if calls and parsed.get("thinking") and parsed["content"]:
            parsed["content"] = ""  # gpt-oss refuses both beside tool calls; the reasoning is what the call follows
        return parsed

    def _plain(self, text: str) -> str:
        for token in getattr(self.tokenizer, "all_special_tokens", ()):
            text = text.replace(token, "")
        return text

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special tokens in the text become their ids; no bos/eos is added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The first prompt: the messages rendered with the generation prompt of the first assistant turn."""
        return self.encode(self.render(messages, add_generation_prompt=True, tools=tools))

    def decode_action(self, ids: Sequence[int]) -> str:
        """The action text the env receives: the sampled ids decoded, without a final end-of-turn token."""
        if ids and ids[-1] in self.stop_token_ids:
            ids = ids[:-1]
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def written_closings(self, sampled: int | Sequence[int] | None) -> list[str]:
        """Text the model itself wrote to close its turn, longest first: the run of special tokens that ends the
        turn, when its last is an end-of-turn token (Cohere 2 closes with ``<|END_RESPONSE|><|END_OF_TURN_TOKEN|>``),
        and the same with the last token read as the closing it stands for (:attr:`Family.stands_for`)."""
        ids = [] if sampled is None else [sampled] if isinstance(sampled, int) else list(sampled)
        if not ids or ids[-1] not in self.stop_token_ids:
            return []
        special = self.stop_token_ids | set(getattr(self.tokenizer, "all_special_ids", ()))
        start = len(ids) - 1
        while start > 0 and ids[start - 1] in special:
            start -= 1
        last = self._stop_text[ids[-1]]
        alias = dict(self.family.stands_for).get(last)
        out = []
        for k in range(start, len(ids)):
            tail = self.tokenizer.decode(ids[k:], skip_special_tokens=False)
            out.extend([tail] if alias is None else [tail, tail[: len(tail) - len(last)] + alias])
        return [t for t in out if t]

    def suffix_text(self, history: Sequence[Message], new_messages: Sequence[Message],
                    last_sampled: int | Sequence[int] | None, tools: list[dict[str, Any]] | None = None) -> str:
        """The template text after the agent turn that ends ``history`` (an assistant message), up to the next
        assistant turn's generation prompt, minus the closing the model already wrote (:meth:`written_closings` of
        ``last_sampled``: the turn's sampled ids, or its last id).

        A turn the template renders from its parsed ``tool_calls`` (gpt-oss) is not rendered as given, so its end is
        found by rendering the history alone and then with the env messages: the second must extend the first."""
        if not history or history[-1].get("role") != "assistant":
            raise ConfigError("suffix_text needs a history that ends with the assistant message of the turn")
        written = self.written_closings(last_sampled)
        if self.shape.tool_role == "call" and self.structure(str(history[-1].get("content") or "")).get("tool_calls"):
            before = self.render(history, add_generation_prompt=False, tools=tools)
            after = self.render([*history, *new_messages], add_generation_prompt=True, tools=tools)
            if not after.startswith(before):
                raise ConfigError(f"the chat template of family {self.shape.family} renders a tool-call turn "
                                  "differently once the env's reply follows; the rollout engine needs it unchanged")
            text = after[len(before):]
            if not any(before.endswith(w) for w in written):  # the model did not write the closing: scaffolding
                text = next((t for t in self._stop_text.values() if t and before.endswith(t)), "") + text
            return text
        rendered = self.render([*history[:-1], {"role": "assistant", "content": _SENTINEL}, *new_messages],
                               add_generation_prompt=True, tools=tools)
        cut = rendered.find(_SENTINEL)
        if cut < 0:
            raise ConfigError("the chat template dropped or rewrote the assistant message; the rollout engine needs a "
                              "template that renders assistant content as given")
        text = rendered[cut + len(_SENTINEL):]
        return next((text[len(w):] for w in written if text.startswith(w)), text)

    def suffix_ids(self, history: Sequence[Message], new_messages: Sequence[Message],
                   last_sampled: int | Sequence[int] | None, tools: list[dict[str, Any]] | None = None) -> list[int]:
        """:meth:`suffix_text`, tokenized once."""
        return self.encode(self.suffix_text(history, new_messages, last_sampled, tools))


def parse_with_template(text: str, template: dict[str, Any], prefix: str, closings: Sequence[str] = ()) -> Message:
    """``text`` parsed by a response template (``transformers.utils.chat_parsing.parse_response``, what
    ``tokenizer.parse_response`` calls), retried with each of ``closings`` after it when it does not parse alone.
    Raises ``ValueError`` (the first failure) when none parses. Model text is data: transformers' JSON content parser
    (``chat_parsing/content_parsers.py`` ``_json``, ``json.loads``) raises ``RecursionError`` on deeply nested
    brackets, which is a failed parse like any other."""
    from transformers.utils.chat_parsing import parse_response

    first: ValueError | None = None
    for closing in ("", *closings):
        try:
            return dict(parse_response(text + closing, template, prefix=prefix))
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as e:
            first = first or (e if isinstance(e, ValueError) else ValueError(f"{type(e).__name__}: {e}"))
    assert first is not None
    raise first


def default_stop_ids(tokenizer: Any, family: Family = UNKNOWN) -> list[int]:
    """The tokenizer's eos id(s) and the end-of-turn tokens of ``family`` that the vocabulary has (for an unknown
    family: ``<|im_end|>``, ``<|eot_id|>``, ``<|end|>``, ``<end_of_turn>``, ``<|endoftext|>``)."""
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list | tuple):
        ids.update(int(i) for i in eos)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for name in family.end_of_turn:
        if name in vocab:
            ids.add(int(vocab[name]))
    return sorted(ids)


def response_template(tokenizer: Any, chat_template: str) -> dict[str, Any] | None:
    """The family's response template for transformers' ``parse_response``: the tokenizer's own
    (``tokenizer.response_template``), else the one TRL pairs with this exact template
    (``trl.chat_template_utils.add_response_schema``, given a stand-in object so the tokenizer is left as it is),
    else ``None``."""
    own = getattr(tokenizer, "response_template", None)
    if own is not None or not hasattr(tokenizer, "parse_response"):
        return own
    try:
        from trl.chat_template_utils import add_response_schema
    except ImportError:
        return None
    # TRL pairs parsers with exact templates; its training patches and a family's other templates parse the same
    name = template_name(chat_template) or ""
    family = detect_family(chat_template).name
    for candidate in (chat_template, trl_template(name.removesuffix("_training")), trl_template(_PARSER_OF.get(family))):
        holder = types.SimpleNamespace(chat_template=candidate, response_template=None, response_schema=None)
        try:
            add_response_schema(holder)
        except ValueError:  # a template TRL has no parser for
            continue
        if holder.response_template is not None:
            return holder.response_template
    return None


_PARSER_OF = {"gpt-oss": "gptoss", "gemma4": "gemma4"}  # families with one tool-call format: TRL's template for it


def episode_messages(transcript_messages: Sequence[Message]) -> list[Message]:
    """The chat messages of an env transcript, copied (the template may not mutate the env's records)."""
    return [dict(m) for m in transcript_messages]
