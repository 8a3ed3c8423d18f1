"""A small OpenAI-compatible server for a token backend: ``POST /v1/chat/completions`` and ``GET /v1/models``.

For evaluating a local checkpoint through the same HTTP path as a hosted model, and for testing
:class:`~agentgym_r1.adapters.backends.openai.OpenAIBackend` against a real server. One request is generated at a
time; use vLLM's server for throughput.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agentgym_r1.adapters.backends.base import SamplingParams, TokenBackend
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.error import require


def make_app(backend: TokenBackend, chat: ChatTokenizer, model_name: str = "agentgym-r1") -> Any:
    """A FastAPI app serving ``backend`` under the OpenAI chat-completions API."""
    fastapi = require("fastapi", "serve", "the OpenAI-compatible server")
    app = fastapi.FastAPI(title="agentgym-r1 chat completions")
    lock = threading.Lock()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "agentgym-r1"}]}

    @app.post("/v1/chat/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise fastapi.HTTPException(400, "'messages' must be a non-empty list of {role, content} objects")
        stop = body.get("stop") or ()
        params = SamplingParams(max_new_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
                                temperature=float(body.get("temperature", 1.0)), top_p=float(body.get("top_p", 1.0)),
                                stop=(stop,) if isinstance(stop, str) else tuple(stop))
        prompt = chat.prompt_ids(messages)
        with lock:
            gen = backend.generate([prompt], [params.max_new_tokens], params)[0]
        text, reason = chat.decode_action(gen.ids), gen.finish_reason
        if reason == "stop":  # OpenAI semantics: the reply ends before the stop sequence
            cut = min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=len(text))
            text = text[:cut]
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "length" if reason in ("length", "context") else "stop"}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": str(i), "logprob": lp, "top_logprobs": []}
                                              for i, lp in zip(gen.ids, gen.logprobs, strict=True)]}
        return {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                "model": model_name, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(gen.ids),
                          "total_tokens": len(prompt) + len(gen.ids)}}

    return app
