"""The proxy: an OpenAI-compatible server on the policy that records every call as training rows (issue #40).

``agentgym-r1 serve proxy --model DIR`` (or :class:`Proxy` from Python, as the GRPO trainer drives it) serves
``POST /v1/chat/completions`` with ``tools``, ``tool_choice``, ``stream``, ``n``, ``max_tokens``, ``temperature`` and
``stop``. It is the model server of :mod:`agentgym_r1.adapters.serve` (the same request validation, OpenAI-style
400s, body bound, bounded queue, chunked generation and time limit per request) with three changes:

* the request is rendered by the session's record (:mod:`agentgym_r1.adapters.proxy`): a call that continues the
  previous one is its prompt and completion plus the new messages as a suffix, token for token;
* the reply's text is parsed by the model family's own tool-call reader
  (:func:`agentgym_r1.adapters.native.native_parser`) into OpenAI ``tool_calls`` (``finish_reason: "tool_calls"``);
  ``tool_choice: "none"`` leaves the text as it is. ``"required"`` and a named function are accepted but not
  enforced: the model's own choice is the action that is trained;
* every call is recorded under its session: the ``X-Session-Id`` header, else the API key (``Authorization: Bearer
  KEY``); a call naming neither is refused. ``POST /v1/sessions/{id}/reward`` with ``{"reward": x}`` closes a
  session, ``GET /v1/sessions/{id}`` describes it, ``GET /health`` counts sessions (and those evicted).

``stream: true`` is answered as server-sent events once the completion is generated (the content in one delta, then
the tool calls, then the finish reason): agents that stream work; tokens do not arrive one by one.

Bounds beyond the model server's: ``max_sessions`` live sessions (429 past it), ``max_calls`` per session,
``session_tokens`` (each call's prompt plus ``max_tokens`` within the session's first prompt plus that many tokens:
the trainer's completion budget), and sessions idle past ``session_timeout_s`` evicted and counted. ``temperature``
and ``top_p``, when given, replace what each request asks (the trainer samples at its own, so that the recorded
log-probabilities are those its loss recomputes).
"""

# No ``from __future__ import annotations``: FastAPI reads the request model from the live annotations of the endpoint.
import dataclasses
import json
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentgym_r1.adapters.backends.base import TokenBackend
from agentgym_r1.adapters.generation_queue import Job, Row
from agentgym_r1.adapters.native import native_parser
from agentgym_r1.adapters.proxy import Choice, ProxyRefused, Session, SessionStore, batch_of, reply_message
from agentgym_r1.adapters.records import Layout, RolloutBatch
from agentgym_r1.adapters.serve import ChatCompletions, RequestRefused, app_for, request_model
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.core.spaces import utf8_safe
from agentgym_r1.error import ConfigError, require

__all__ = ["Proxy", "ProxyCompletions", "proxy_app", "session_of"]

SESSION_HEADER = "x-session-id"
MAX_SESSION_ID = 256


class ProxyCompletions(ChatCompletions):
    """:class:`ChatCompletions` that renders through a :class:`SessionStore` and records each call there."""

    def __init__(
        self,
        backend: TokenBackend,
        chat: ChatTokenizer,
        model_name: str = "agentgym-r1",
        *,
        session_timeout_s: float = 600.0,
        max_sessions: int = 1024,
        max_calls: int = 256,
        session_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        **limits: Any,
    ) -> None:
        super().__init__(backend, chat, model_name, **limits)
        for name, value, low in (("temperature", temperature, 0.0), ("top_p", top_p, 1e-9)):
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value >= low):
                raise ConfigError(f"{name} must be a finite number >= {low:g} or None, got {value!r}")
        self.fixed = {k: float(v) for k, v in (("temperature", temperature), ("top_p", top_p)) if v is not None}
        if session_tokens is not None and (
            not isinstance(session_tokens, int) or isinstance(session_tokens, bool) or session_tokens < 1
        ):
            raise ConfigError(f"session_tokens must be an int >= 1 or None, got {session_tokens!r}")
        self.sessions = SessionStore(chat, timeout_s=session_timeout_s, max_sessions=max_sessions, max_calls=max_calls)
        self.session_tokens = session_tokens
        self.reader = native_parser(chat).reader

    def health(self) -> dict[str, Any]:
        return {**super().health(), **self.sessions.stats()}

    def planned(self, session: Session, request: Any) -> tuple[Any, Job]:
        """The session's plan for ``request`` and its job (the bounds checked: 400 past them)."""
        messages = [
            {**m.model_dump(exclude_none=True), "content": None if m.content is None else utf8_safe(m.content)}
            for m in request.messages
        ]
        self.bound(messages)
        tools = [t.model_dump(exclude_none=True) for t in request.tools] if request.tools else None
        plan = self.sessions.plan(session, messages, tools, self.tokenized)
        first = plan.first_prompt or len(plan.prompt)
        limit = None if self.session_tokens is None else first + self.session_tokens
        what = f"This session's token budget (its first prompt of {first} tokens plus session_tokens)"
        try:
            job = self.job_for(request, plan.prompt, limit, what)
        except RequestRefused:
            if limit is not None and limit < self.context:
                session.end_reason = "context_limit"
            raise
        job.params = dataclasses.replace(job.params, **self.fixed)  # the trainer's sampling, whatever was asked
        return plan, job

    async def call(self, session_id: str, request: Any) -> dict[str, Any]:
        """Serve and record one call of session ``session_id``; the OpenAI response."""
        from starlette.concurrency import run_in_threadpool

        try:
            session = self.sessions.open(session_id)
        except ProxyRefused as e:
            raise RequestRefused(e.status, str(e), code=e.code) from e
        try:
            plan, job = await run_in_threadpool(self.planned, session, request)
            rows = await self.run(job)
        except BaseException:
            self.sessions.release(session)
            raise
        tools = bool(request.tools) and request.tool_choice != "none"
        choices = [self.recorded(row, job.params.stop, tools) for row in rows]
        index = self.sessions.record(plan, choices, self.plain(request))
        out = self.reply(request, job, rows)
        for i, (choice, row) in enumerate(zip(choices, rows, strict=True)):
            out["choices"][i]["message"] = choice.message
            if choice.message.get("tool_calls") and row.reason in ("eos", "stop"):
                out["choices"][i]["finish_reason"] = "tool_calls"
        out["session"] = {"id": session_id, "call": index, "layout": session.layout}
        return out

    @staticmethod
    def plain(request: Any) -> list[dict[str, Any]]:
        return [m.model_dump(exclude_none=True) for m in request.messages]

    def recorded(self, row: Row, stop: tuple[str, ...], tools: bool) -> Choice:
        """The choice ``row`` as kept: the text the model wrote, and the message the agent gets (cut before a stop
        string, OpenAI's way; tool calls parsed when the request has tools)."""
        text = self.chat.decode_action(row.ids)
        shown = text
        if row.reason == "stop":
            shown = text[: min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))]
        message = reply_message(self.chat, self.reader, shown, tools)
        return Choice(list(row.ids), [float(x) for x in row.logprobs], row.reason or "length", text, message)


def session_of(headers: Any) -> str:
    """The session a request names: its ``X-Session-Id`` header, else its API key; a 400 when it names none."""
    named = headers.get(SESSION_HEADER)
    if not named:
        auth = headers.get("authorization") or ""
        named = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if not named:
        raise RequestRefused(
            400,
            "Name the session with the X-Session-Id header or the API key (Authorization: Bearer SESSION)",
            param="X-Session-Id",
            code="missing_session",
        )
    if len(named) > MAX_SESSION_ID or not named.isprintable():
        raise RequestRefused(
            400,
            f"The session id must be at most {MAX_SESSION_ID} printable characters (got {len(named)})",
            param="X-Session-Id",
            code="invalid_session",
        )
    return named


def sse(out: dict[str, Any], usage: bool) -> list[str]:
    """The events of a streamed response: per choice its content, its tool calls, its finish reason; then the usage
    when asked (``stream_options.include_usage``), then ``[DONE]``."""
    base = {"id": out["id"], "object": "chat.completion.chunk", "created": out["created"], "model": out["model"]}
    events = []
    for c in out["choices"]:
        m = c["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": m.get("content")}
        events.append({**base, "choices": [{"index": c["index"], "delta": delta, "finish_reason": None}]})
        if m.get("tool_calls"):
            calls = [{"index": j, **call} for j, call in enumerate(m["tool_calls"])]
            events.append(
                {**base, "choices": [{"index": c["index"], "delta": {"tool_calls": calls}, "finish_reason": None}]}
            )
        events.append({**base, "choices": [{"index": c["index"], "delta": {}, "finish_reason": c["finish_reason"]}]})
    if usage:
        events.append({**base, "choices": [], "usage": out["usage"]})
    return [f"data: {json.dumps(e)}\n\n" for e in events] + ["data: [DONE]\n\n"]


def proxy_app(service: ProxyCompletions) -> Any:
    """The FastAPI app of ``service`` (see the module docstring)."""
    fastapi = require("fastapi", "serve", "the proxy")
    from pydantic import BaseModel, ConfigDict

    ChatRequest = request_model(service.max_n, tools=True)
    app = app_for(service, "agentgym-r1 proxy")

    class Reward(BaseModel):
        model_config = ConfigDict(strict=True, allow_inf_nan=False)
        reward: float

    def refused(e: ProxyRefused) -> RequestRefused:
        return RequestRefused(e.status, str(e), code=e.code)

    @app.post("/v1/chat/completions")
    async def completions(request: ChatRequest, http: fastapi.Request) -> Any:
        session_id = session_of(http.headers)
        out = await service.call(session_id, request)
        headers = {"X-Session-Id": session_id}
        if not request.stream:
            return fastapi.responses.JSONResponse(out, headers=headers)
        usage = bool((request.stream_options or {}).get("include_usage"))
        return fastapi.responses.StreamingResponse(
            iter(sse(out, usage)), media_type="text/event-stream", headers=headers
        )

    @app.post("/v1/sessions/{session_id}/reward")
    def reward(session_id: str, body: Reward) -> Any:
        try:
            return service.sessions.close(session_id, body.reward).summary()
        except ProxyRefused as e:
            raise refused(e) from e

    @app.get("/v1/sessions/{session_id}")
    def describe(session_id: str) -> Any:
        try:
            return service.sessions.get(session_id).summary()
        except ProxyRefused as e:
            raise refused(e) from e

    return app


class Proxy:
    """The proxy from Python: serves ``backend`` on ``host:port`` (0: a free port) in a thread.

    ``with Proxy(HFBackend(model, chat), chat, reward_fn=score) as proxy:`` then point an agent at
    :attr:`base_url` with its session as the API key, :meth:`close` each session (``reward_fn`` of its messages, or
    the reward given) and take the rows with :meth:`batch`. ``limits`` are :class:`ProxyCompletions`'s."""

    def __init__(
        self,
        backend: TokenBackend,
        chat: ChatTokenizer,
        model_name: str = "agentgym-r1",
        *,
        reward_fn: Callable[[list[dict[str, Any]]], float] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        **limits: Any,
    ) -> None:
        if reward_fn is not None and not callable(reward_fn):
            raise ConfigError(f"reward_fn must be a function of the session's messages, got {reward_fn!r}")
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"port must be an int from 0 to 65535, got {port!r}")
        self.service = ProxyCompletions(backend, chat, model_name, **limits)
        self.reward_fn, self.host, self.port = reward_fn, host, port
        self.app = proxy_app(self.service)
        self.server: Any = None
        self.thread: threading.Thread | None = None

    @property
    def sessions(self) -> SessionStore:
        return self.service.sessions

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``http://HOST:PORT/v1``) once started."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> "Proxy":
        uvicorn = require("uvicorn", "serve", "the proxy")
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, name="agentgym-r1-proxy", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise ConfigError(f"the proxy did not start on {self.host}:{self.port} within {timeout_s:g} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=30)
        self.server = self.thread = None

    def __enter__(self) -> "Proxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def close(
        self,
        session_id: str,
        reward: float | None = None,
        reward_fn: Callable[[list[dict[str, Any]]], float] | None = None,
        **kwargs: Any,
    ) -> Session:
        """Close a session with ``reward``, else ``reward_fn`` (default: the proxy's) of its messages; ``kwargs``
        are :meth:`SessionStore.close`'s (``end_reason``, ``error``)."""
        return self.sessions.close(session_id, reward, reward_fn or self.reward_fn, **kwargs)

    def batch(
        self, session_ids: Sequence[str], layout: Layout | None = None, groups: Sequence[int] | None = None
    ) -> RolloutBatch:
        """Take these sessions out of the proxy as rows (:func:`agentgym_r1.adapters.proxy.batch_of`)."""
        return batch_of(self.sessions.take(session_ids), layout, groups, self.service.chat.pad_token_id)


def load_backend(model_dir: str, backend: str = "transformers", device: str = "cpu") -> tuple[Any, ChatTokenizer]:
    """The generation backend and chat tokenizer of a local model directory: transformers on ``device``, or vLLM."""
    from agentgym_r1.adapters.loading import load_model, load_tokenizer

    if backend not in ("transformers", "vllm"):
        raise ConfigError(f"backend must be 'transformers' or 'vllm', got {backend!r}")
    chat = ChatTokenizer(load_tokenizer(model_dir, "model"))
    if backend == "vllm":
        vllm = require("vllm", "vllm", "the proxy's vLLM backend")
        from agentgym_r1.adapters.backends.vllm import VLLMBackend

        return VLLMBackend(chat, llm=vllm.LLM(model=model_dir)), chat
    from agentgym_r1.adapters.backends.hf import HFBackend

    return HFBackend(load_model(model_dir, "model", device=device), chat), chat


def serve(
    model_dir: str,
    *,
    backend: str = "transformers",
    device: str = "cpu",
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    **limits: Any,
) -> None:
    """``agentgym-r1 serve proxy --model DIR``: the proxy on ``host:port`` until interrupted. Sessions are closed by
    a posted reward (``POST /v1/sessions/{id}/reward``); ``limits`` are :class:`ProxyCompletions`'s."""
    uvicorn = require("uvicorn", "serve", "agentgym-r1 serve proxy")
    generator, chat = load_backend(model_dir, backend, device)
    name = model_dir.rstrip("/").rsplit("/", 1)[-1] or "agentgym-r1"
    uvicorn.run(proxy_app(ProxyCompletions(generator, chat, name, **limits)), host=host, port=port, log_level=log_level)
