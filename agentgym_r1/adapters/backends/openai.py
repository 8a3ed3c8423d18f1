"""An OpenAI-compatible chat-completions endpoint as a backend, for evaluation.

The server applies its own chat template, so this backend works on messages and returns text: the rollout engine
plays the episodes and records actions, rewards and success, but no token ids (``Episode.text_only``), so its
episodes give no training rows. Requests for the live episodes of a round go out concurrently.

OpenAI's API leaves the stop sequence out of the returned text. When a reply stopped on one and the text has an
unclosed ``<tag>`` whose closing tag is a stop string (``</tool_call>``, ``</answer>``...), the closing tag is put
back so the env sees the action as the model wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym_r1.adapters.backends.base import ChatReply, SamplingParams
from agentgym_r1.error import ConfigError, require


class OpenAIBackend:
    """``base_url`` up to ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``); ``model`` the served model's name.
    ``extra_body`` is merged into every request (e.g. vLLM's ``{"include_stop_str_in_output": True}``)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_concurrency: int = 16,
        timeout: float = 120.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        httpx = require("httpx", "serve", "the OpenAI-compatible backend")
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_concurrency = max_concurrency
        self.extra_body = dict(extra_body or {})
        self.client = httpx.Client(headers=headers, timeout=timeout)
        self._calls = 0

    def chat(self, conversations: Sequence[Sequence[dict[str, Any]]], params: SamplingParams) -> list[ChatReply]:
        if not conversations:
            return []
        workers = min(self.max_concurrency, len(conversations))
        self._calls += 1
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(lambda ic: self._one(ic[1], params, ic[0]), enumerate(conversations)))

    def _one(self, messages: Sequence[dict[str, Any]], params: SamplingParams, row: int) -> ChatReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": True,
            **self.extra_body,
        }
        if params.stop:
            body["stop"] = list(params.stop)[:4]  # OpenAI accepts at most four
        if params.seed is not None:  # one seed per request, else the samples of a group would be the same
            body["seed"] = params.seed + 1_000_003 * self._calls + row
        response = self.client.post(self.url, json=body)
        response.raise_for_status()
        choice = response.json()["choices"][0]
        text = choice["message"].get("content") or ""
        reason = "length" if choice.get("finish_reason") == "length" else "stop"
        if reason == "stop":
            text = restore_stop(text, params.stop)
        content = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(e["logprob"]) for e in content] or None
        return ChatReply(text, reason, logprobs)

    def close(self) -> None:
        self.client.close()


def restore_stop(text: str, stop: Sequence[str]) -> str:
    """Append the closing tag among ``stop`` whose opening tag is left unclosed in ``text`` (OpenAI's API drops the
    stop sequence from the reply)."""
    if any(text.endswith(s) for s in stop):
        return text
    for s in stop:
        if s.startswith("</") and s.endswith(">"):
            opening = "<" + s[2:]
            if text.count(opening) > text.count(s):
                return text + s
    return text
