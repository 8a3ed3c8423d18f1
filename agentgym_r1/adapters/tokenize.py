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

from collections.abc import Sequence
from typing import Any

from agentgym_r1.error import ConfigError

Message = dict[str, Any]

_SENTINEL = "\x00agentgym-r1-turn-end\x00"


class ChatTokenizer:
    """A tokenizer and its chat template, as the rollout engine needs them.

    ``tokenizer`` is a Hugging Face tokenizer (anything with ``apply_chat_template``, ``__call__`` and ``decode``).
    ``stop_token_ids`` are the end-of-turn ids that end a generation (default: the tokenizer's eos ids and, when the
    vocabulary has it, ``<|im_end|>``). ``tools`` is passed to the template when given (most envs already describe
    their tools in the system prompt, so the default is none).
    """

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None,
                 stop_token_ids: Sequence[int] | None = None, tools: list[dict[str, Any]] | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ConfigError(f"the tokenizer {type(tokenizer).__name__} has no chat template; pass chat_template=")
        self.tools = tools
        self.stop_token_ids = frozenset(default_stop_ids(tokenizer) if stop_token_ids is None else stop_token_ids)
        if not self.stop_token_ids:
            raise ConfigError("no stop token ids: the tokenizer has no eos token; pass stop_token_ids=")
        self._stop_text = {i: tokenizer.decode([i], skip_special_tokens=False) for i in self.stop_token_ids}
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id: int = pad if pad is not None else min(self.stop_token_ids)

    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        if self.tools:
            kwargs["tools"] = self.tools
        return self.tokenizer.apply_chat_template(list(messages), **kwargs)

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special tokens in the text become their ids; no bos/eos is added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The first prompt: the messages rendered with the generation prompt of the first assistant turn."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def decode_action(self, ids: Sequence[int]) -> str:
        """The action text the env receives: the sampled ids decoded, without a final end-of-turn token."""
        if ids and ids[-1] in self.stop_token_ids:
            ids = ids[:-1]
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def suffix_text(self, history: Sequence[Message], new_messages: Sequence[Message],
                    last_sampled: int | None) -> str:
        """The template text after the agent turn that ends ``history`` (an assistant message), up to the next
        assistant turn's generation prompt, minus the text of the end-of-turn token the model already emitted."""
        if not history or history[-1].get("role") != "assistant":
            raise ConfigError("suffix_text needs a history that ends with the assistant message of the turn")
        rendered = self.render([*history[:-1], {"role": "assistant", "content": _SENTINEL}, *new_messages],
                               add_generation_prompt=True)
        cut = rendered.find(_SENTINEL)
        if cut < 0:
            raise ConfigError("the chat template dropped or rewrote the assistant message; the rollout engine needs a "
                              "template that renders assistant content as given")
        text = rendered[cut + len(_SENTINEL):]
        if last_sampled is not None and last_sampled in self._stop_text:
            emitted = self._stop_text[last_sampled]
            if emitted and text.startswith(emitted):
                text = text[len(emitted):]
        return text

    def suffix_ids(self, history: Sequence[Message], new_messages: Sequence[Message],
                   last_sampled: int | None) -> list[int]:
        """:meth:`suffix_text`, tokenized once."""
        return self.encode(self.suffix_text(history, new_messages, last_sampled))


def default_stop_ids(tokenizer: Any) -> list[int]:
    """The tokenizer's eos id(s) and its end-of-turn token (``<|im_end|>``, ``<|eot_id|>``...) when it has one."""
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list | tuple):
        ids.update(int(i) for i in eos)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for name in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"):
        if name in vocab:
            ids.add(int(vocab[name]))
    return sorted(ids)


def episode_messages(transcript_messages: Sequence[Message]) -> list[Message]:
    """The chat messages of an env transcript, copied (the template may not mutate the env's records)."""
    return [dict(m) for m in transcript_messages]
