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

import re
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

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        stop_token_ids: Sequence[int] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
        if not template:
            raise ConfigError(f"the tokenizer {type(tokenizer).__name__} has no chat template; pass chat_template=")
        template_text = template if isinstance(template, str) else str(template.get("default", template))
        self.family = detect_family(template_text)
        self.tools = tools
        self.stop_token_ids = frozenset(
            default_stop_ids(tokenizer, self.family) if stop_token_ids is None else stop_token_ids
        )
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
                "model's text; set tokenizer.response_template (see transformers' response parsing docs)"
            )

    def _lists_tools(self) -> bool:
        """Whether the template writes the tools given as ``tools=`` (the probe tool's name shows in the prompt)."""
        schema = {
            "type": "function",
            "function": {
                "name": "agentgymprobetool",
                "description": "probe",
                "parameters": {"type": "object", "properties": {}},
            },
        }
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

    def render(
        self, messages: Sequence[Message], add_generation_prompt: bool, tools: list[dict[str, Any]] | None = None
    ) -> str:
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
        return parse_with_template(text, self.response_template, self.shape.generation_prompt, self.family.end_of_turn)

    def structure(self, text: str) -> Message:
        """An assistant message rebuilt from the model's text by :meth:`parse_response` (content normalised and a
        failed parse kept as text, as TRL's ``chat_template_utils.parse_response`` does)."""
        try:
            parsed = self.parse_response(text)
        except ValueError:
            parsed = {}
        parsed["role"] = "assistant"
        calls = [
            c
            for c in parsed.get("tool_calls") or []
            if isinstance(c, dict) and isinstance((c.get("function") or c).get("name"), str)
        ]
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

    def suffix_text(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled: int | Sequence[int] | None,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
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
                raise ConfigError(
                    f"the chat template of family {self.shape.family} renders a tool-call turn "
                    "differently once the env's reply follows; the rollout engine needs it unchanged"
                )
            text = after[len(before) :]
            if not any(before.endswith(w) for w in written):  # the model did not write the closing: scaffolding
                text = next((t for t in self._stop_text.values() if t and before.endswith(t)), "") + text
            return text
        rendered = self.render(
            [*history[:-1], {"role": "assistant", "content": _SENTINEL}, *new_messages],
            add_generation_prompt=True,
            tools=tools,
        )
        cut = rendered.find(_SENTINEL)
        if cut < 0:
            raise ConfigError(
                "the chat template dropped or rewrote the assistant message; the rollout engine needs a "
                "template that renders assistant content as given"
            )
        text = rendered[cut + len(_SENTINEL) :]
        return next((text[len(w) :] for w in written if text.startswith(w)), text)

    def suffix_ids(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        last_sampled: int | Sequence[int] | None,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """:meth:`suffix_text`, tokenized once."""
        return self.encode(self.suffix_text(history, new_messages, last_sampled, tools))


STREAM_CHUNK = 2048  # characters fed to transformers' parser at a time
MAX_MARKERS = 256  # of each of a template's literal delimiters in one message
MAX_STRING_DELIMITERS = 64  # of a JSON region's custom string delimiter (Gemma 4's <|"|>): 32 strings
MAX_NAME = 256  # characters of a tool or argument name


def parse_with_template(text: str, template: dict[str, Any], prefix: str, closings: Sequence[str] = ()) -> Message:
    """``text`` parsed by a response template with transformers' ``ResponseParser`` (what ``parse_response`` and
    ``tokenizer.parse_response`` run), retried with each of ``closings`` after it when it does not parse alone and
    the closing ends a delimiter of the template's explicit fields there (:func:`_closings_that_close`: Llama's
    ``}<|eot_id|>``; Gemma 4's end-of-turn tokens close no call, so its failed parse is one pass, not three).
    Raises ``ValueError`` (the first failure) when none parses.

    Model text is data, so the work is bounded: the text is fed in chunks of ``STREAM_CHUNK`` characters, as a
    stream (``parse_response`` feeds it whole, and the ``regex`` module's partial matching, which ``feed`` uses to
    hold back a delimiter that may still grow, takes time quadratic in the buffer on some delimiters: LFM2's
    ``(?:<\\|tool_call_start\\|>\\[|,\\s*)`` on runs of ``<|`` or commas); the parser's streaming contract gives
    the same message for any split. A text with more than ``MAX_MARKERS`` of one of the template's literal
    delimiters (``</think>``, ``<parameter=``, ...), or more than ``MAX_STRING_DELIMITERS`` of a JSON region's string
    delimiter (``<|"|>``), is refused: the parser's work grows with the number of
    regions and values as well as with the length (``content_parsers._json`` rewrites the whole text once per
    string), and no message a model means holds that many. The template should
    come through :func:`anchored`. transformers' JSON content parser (``json.loads``) raises ``RecursionError`` on
    deeply nested brackets, which is a failed parse like any other."""
    from transformers.utils.chat_parsing import ResponseParser
    from transformers.utils.chat_parsing.response_templates import load_response_template

    crowded = _crowded(text, template)
    if crowded is not None:
        raise ValueError(crowded)
    spec = load_response_template(template)  # compiled once; ResponseParser takes the compiled form as it is
    first: ValueError | None = None
    for closing in ("", *_closings_that_close(text, spec, closings)):
        try:
            parser = ResponseParser(spec, prefix=prefix)
            whole = text + closing
            for start in range(0, len(whole), STREAM_CHUNK):
                parser.feed(whole[start : start + STREAM_CHUNK])
            return dict(parser.finalize()[0])
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as e:
            first = first or (e if isinstance(e, ValueError) else ValueError(f"{type(e).__name__}: {e}"))
    assert first is not None
    raise first


CLOSE_CONTEXT = 256  # characters of the text's end that a closing may complete a delimiter with


def _closings_that_close(text: str, spec: Any, closings: Sequence[str]) -> list[str]:
    """The ``closings`` that complete the close delimiter of one of ``spec``'s explicit fields (those with an open
    delimiter) at the end of ``text``. Only these can change a failed parse: any other closing either joins the open
    region's body (a call's JSON does not become valid by ending in ``<turn|>``) or ends the implicit region, which
    the end of the text ends the same way. Checked on the last :data:`CLOSE_CONTEXT` characters, so it costs nothing
    next to a parse."""
    tail = text[-CLOSE_CONTEXT:]
    closes = [f.close_re for f in spec.fields.values() if f.open_re is not None and f.close_re is not None]
    return [
        c for c in closings if c and any(m.end() > len(tail) for pattern in closes for m in pattern.finditer(tail + c))
    ]


def _crowded(text: str, template: dict[str, Any]) -> str | None:
    """Why ``text`` holds too many of the template's markers to parse, or ``None``."""
    strings = _string_delimiters(template)
    for marker in sorted(_markers(template) | strings):
        count, cap = text.count(marker), MAX_STRING_DELIMITERS if marker in strings else MAX_MARKERS
        if count > cap:
            return f"the text holds {count} {marker!r}; a message is read with at most {cap} of it"
    return None


def _string_delimiters(template: dict[str, Any]) -> set[str]:
    """The opening string delimiters of the template's JSON regions (Gemma 4's ``<|"|>``)."""
    return {
        pair[0]
        for spec in (template.get("fields") or {}).values()
        if isinstance(spec, dict)
        for pair in (spec.get("content_args") or {}).get("string_delims") or ()
        if pair and pair[0]
    }


def _markers(template: dict[str, Any]) -> set[str]:
    """The literal delimiters of ``template``: each field's ``open``/``close``, the literal starts of its patterns
    (:func:`_literal_starts`) and the literal start (or key separator, LFM2's ``=``) of its tag pattern."""
    found: set[str] = set()
    for spec in (template.get("fields") or {}).values():
        if not isinstance(spec, dict):
            continue
        found.update(spec[key] for key in ("open", "close") if isinstance(spec.get(key), str))
        found.update(
            start
            for key in ("open_pattern", "close_pattern")
            if isinstance(spec.get(key), str)
            for start in _literal_starts(spec[key])
            if len(start) > 1
        )
        args = spec.get("content_args") or {}
        tag = args.get("tag_pattern")
        if isinstance(tag, str):
            separator = _KEY_SEPARATOR.match(tag)
            found.add(separator[1] if separator else _literal_prefix(tag))  # LFM2's "=": one per argument
    return {m for m in found if m.strip()}


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
    """:func:`stock_response_template` rewritten by :func:`anchored` to parse any text in linear time."""
    stock = stock_response_template(tokenizer, chat_template)
    return anchored(stock) if isinstance(stock, dict) else stock


def stock_response_template(tokenizer: Any, chat_template: str) -> dict[str, Any] | None:
    """The family's response template for transformers' ``parse_response``, as given: the tokenizer's own
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
    for candidate in (
        chat_template,
        trl_template(name.removesuffix("_training")),
        trl_template(_PARSER_OF.get(family)),
    ):
        holder = types.SimpleNamespace(chat_template=candidate, response_template=None, response_schema=None)
        try:
            add_response_schema(holder)
        except ValueError:  # a template TRL has no parser for
            continue
        if holder.response_template is not None:
            return holder.response_template
    return None


_UNANCHORED_LOOKAHEAD = "(?=[\\s\\S]*?"
_LAZY_VALUE = "(?P<value>.*?)"
_KEY_SEPARATOR = re.compile(r"\(\?P<key>[^)]*\)([^\\()\[\]{}.*+?|^$]+)")  # (?P<key>\w+)= -> "="
_NAMED_RUN = re.compile(r"\(\?P<(key|name)>(\[[^\]]*\]|\\S|\\w)\+(\??)\)")  # (?P<key>[^>\n]+), (?P<name>\S+?)


def anchored(template: dict[str, Any]) -> dict[str, Any]:
    """``template`` rewritten so that transformers' parser reads any text in time linear in its length, with the same
    result for every well-formed message. Rewrites of patterns that scan to the end of the text from each
    place they are tried (transformers' ``ResponseParser._scan`` calls ``pattern.search(buffer, pos)`` and
    ``content_parsers._xml_inline`` calls ``regex.finditer(tag_pattern, body)``, ``chat_parsing/``):

    * a delimiter that is a lookahead for a later marker, ``(?=[\\s\\S]*?X)`` (the reasoning open of the Nemotron 3
      and DeepSeek-R1 templates, ``X = </think>``), is anchored at the search position with ``\\G``: it holds at a
      position exactly when ``X`` occurs at or after it, so if it fails at ``pos`` it fails at every later position
      (for a full or a partial match alike) and the anchored search finds the same match in one scan;
    * an xml-inline tag pattern's lazy value ``(?P<value>.*?)`` (Qwen3.5/3.6 and Nemotron ``<parameter=K>V
      </parameter>``, GLM ``<arg_key>K</arg_key><arg_value>V</arg_value>``) may not run over the tag's own opener
      (``<parameter=``, ``<arg_key>``), so an opener never closed scans only to the next opener. A well-formed call
      closes each value before the next tag opens, so it parses the same; a value holding an unclosed opener is read
      from the last opener instead of the first;
    * a named run, a tool's or an argument's name (gpt-oss ``to=functions\\.(?P<name>\\S+?)<\\|channel\\|>``,
      ``<function=(?P<name>[^\\n>]+)>``, ``<parameter=(?P<key>[^>\\n]+)>``), is at most ``MAX_NAME`` characters: an
      opener whose name never ends then fails after that many characters instead of at the end of the text (and
      stops holding the stream back as a match that might still grow)."""
    fields = template.get("fields")
    if not isinstance(fields, dict):
        return template
    out = {**template, "fields": {}}
    for name, spec in fields.items():
        if isinstance(spec, dict):
            spec = {
                **spec,
                **{
                    key: "\\G" + spec[key]
                    for key in ("open_pattern", "close_pattern")
                    if isinstance(spec.get(key), str) and _whole_lookahead(spec[key])
                },
            }
            if isinstance(spec.get("open_pattern"), str):
                spec["open_pattern"] = _bounded_runs(spec["open_pattern"])
            args = spec.get("content_args")
            tag = args.get("tag_pattern") if isinstance(args, dict) else None
            if spec.get("content") == "xml-inline" and isinstance(tag, str):
                values = args.get("value_parser") or {}
                stripped = values.get("name", "text") == "text" and (values.get("args") or {}).get("strip", True)
                spec["content_args"] = {**args, "tag_pattern": _bounded_runs(tag, stripped)}
        out["fields"][name] = spec
    return out


def _bounded_runs(pattern: str, stripped: bool = False) -> str:
    """``pattern`` with its named runs (``(?P<name>\\S+?)``, ``(?P<key>[^>\\n]+)``) at most ``MAX_NAME`` characters
    long, and its lazy ``(?P<value>.*?)`` kept from running over the pattern's own opener (its literal start). Where
    the value is ``stripped`` (its parser is ``text``, which strips) and the opener and the value's closing tag start
    with the same character, the value is a possessive run up to the closing tag or the next opener (a tempered lazy
    run tries the closing tag after every character: 100 ms over 100,000 characters, against 1 ms)."""
    opener = _literal_prefix(pattern)
    if len(opener) > 1 and _LAZY_VALUE in pattern:
        tail = pattern.split(_LAZY_VALUE, 1)[1]
        close = _literal_prefix(tail.removeprefix("\\s*"))
        if stripped and len(close) > 1 and close[0] == opener[0]:
            first, rest = re.escape(opener[0]), f"{re.escape(close[1:])}|{re.escape(opener[1:])}"
            value = f"(?P<value>(?:[^{first}]++|{first}(?!{rest}))*+)"
        else:
            value = f"(?P<value>(?:(?!{re.escape(opener)})[\\s\\S])*?)"
        pattern = pattern.replace(_LAZY_VALUE, value)
    return _NAMED_RUN.sub(lambda m: f"(?P<{m[1]}>{m[2]}{{1,{MAX_NAME}}}{m[3]})", pattern)


def _literal_prefix(pattern: str) -> str:
    """The characters ``pattern`` starts with before its first regex construct (``<parameter=`` of
    ``<parameter=(?P<key>...``)."""
    end = next((i for i, ch in enumerate(pattern) if ch in "\\()[]{}.*+?|^$"), len(pattern))
    return pattern[:end]


def _literal_starts(pattern: str) -> list[str]:
    """The literal text ``pattern`` starts with, escapes read as the characters they stand for (``<|tool_call>call:``
    of ``<\\|tool_call>call:(?P<name>...``), or each alternative's of a leading ``(?:a|b|c)`` group: Gemma 4's end of
    content ``(?:<turn\\|>|<\\|tool_response>|<eos>)``, which the parser closes a region at, one region per marker
    (14,000 ``<turn|>`` took 120 ms to read)."""
    if not pattern.startswith("(?:"):
        return [_unescaped_start(pattern)]
    starts, current, i = [], pattern[3:], 0
    while i < len(current) and current[i] != ")":  # split the group's alternatives at its unescaped "|"
        i += 2 if current[i] == "\\" else 1
        if i < len(current) and current[i] == "|":
            starts.append(_unescaped_start(current[:i]))
            current, i = current[i + 1 :], 0
    return [*starts, _unescaped_start(current[:i])]


def _unescaped_start(pattern: str) -> str:
    """The characters ``pattern`` starts with before its first regex construct, ``\\|`` read as ``|`` (an escaped
    punctuation character is that character)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum() and not pattern[i + 1].isspace():
            out.append(pattern[i + 1])
            i += 2
        elif ch in "\\()[]{}.*+?|^$":
            break
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _whole_lookahead(pattern: str) -> bool:
    """Whether ``pattern`` is one ``(?=[\\s\\S]*?...)`` group and nothing else (escapes and classes skipped)."""
    if not pattern.startswith(_UNANCHORED_LOOKAHEAD):
        return False
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i == len(pattern) - 1
        i += 1
    return False


_PARSER_OF = {"gpt-oss": "gptoss", "gemma4": "gemma4"}  # families with one tool-call format: TRL's template for it
