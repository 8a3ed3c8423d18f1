"""A small OpenAI-compatible server for a token backend: ``POST /v1/chat/completions``, ``GET /v1/models`` and
``GET /health`` (the requests queued or in progress).

For evaluating a local checkpoint through the same HTTP path as a hosted model, and for testing
:class:`~agentgym_r1.adapters.backends.openai.OpenAIBackend` against a real server; use vLLM's server for throughput.

What a request may ask is bounded before any work: the body (413), the messages' length in characters (checked before
tokenizing: a prompt longer than ``max_context`` tokens could hold), then the prompt plus ``max_tokens`` in tokens
(the model's context), ``n`` (at most ``max_n`` choices, each generated), the number and length of stop strings. Every
malformed field answers 400 in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``; FastAPI's own 422
included. Requests then go to a :class:`~agentgym_r1.adapters.generation_queue.GenerationQueue`: at most ``max_queue``
queued or in progress (429 past that), served in chunks of ``chunk_tokens`` round-robin so one long request does not
hold the others (with the transformers backend each of the first ``cached_requests`` keeps its own key/value cache
between its chunks), each within ``request_timeout_s`` (503 with code ``timeout`` past it).
"""

# No ``from __future__ import annotations``: FastAPI reads the request model from the live annotations of the endpoint
# defined inside make_app.
import asyncio
import contextlib
import json
import math
import reprlib
import time
from typing import Any, Literal

from agentgym_r1.adapters.backends.base import SamplingParams, TokenBackend
from agentgym_r1.adapters.generation_queue import GenerationQueue, Job, JobTimeout, QueueFull, Row
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.core.spaces import utf8_safe
from agentgym_r1.error import AgentGymError, ConfigError, require

__all__ = [
    "ChatCompletions",
    "RequestRefused",
    "app_for",
    "context_length",
    "make_app",
    "refusal_of",
    "request_model",
]

MAX_STOP = 4  # OpenAI's bound
MAX_STOP_CHARS = 256
INT64 = 2**63


class RequestRefused(AgentGymError):
    """A request the server answers with an OpenAI-style error (``status`` its HTTP code)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.kind = status, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


def context_length(backend: TokenBackend, chat: ChatTokenizer) -> int:
    """The model's context in tokens: its config's ``max_position_embeddings`` (transformers), vLLM's
    ``max_model_len``, else the tokenizer's ``model_max_length`` when it is a real bound."""
    config = getattr(getattr(backend, "model", None), "config", None)
    llm = getattr(backend, "llm", None)
    for value in (
        getattr(config, "max_position_embeddings", None),
        getattr(getattr(getattr(llm, "llm_engine", None), "model_config", None), "max_model_len", None),
        getattr(chat.tokenizer, "model_max_length", None),
    ):
        if isinstance(value, int) and 0 < value < 10**7:
            return value
    raise ConfigError("the model's context length is not known from its config or tokenizer; pass max_context=")


def request_model(max_n: int, *, tools: bool = False) -> Any:
    """The pydantic model of a chat-completions request (strict types, finite numbers, OpenAI's ranges). Fields this
    server does not use (``user``, ``presence_penalty``...) are accepted and ignored, as OpenAI's clients send them.
    With ``tools`` (the proxy, :mod:`agentgym_r1.adapters.proxy_server`) it also takes ``tools``, ``tool_choice``,
    ``stream``, assistant messages with ``tool_calls`` and tool messages with their ``tool_call_id``."""
    pydantic = require("pydantic", "serve", "the OpenAI-compatible server")
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    strict = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

    class Message(BaseModel):
        model_config = strict
        role: Literal["system", "developer", "user", "assistant", "tool"]
        content: str

        @field_validator("content", mode="before")
        @classmethod
        def text_of(cls, v: Any) -> Any:
            if isinstance(v, list) and all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in v
            ):
                return "".join(p["text"] for p in v)
            if not isinstance(v, str):
                raise ValueError('content must be a string or a list of {"type": "text", "text": "..."} parts')
            return v

    class ChatRequest(BaseModel):
        model_config = strict
        model: str | None = None
        messages: list[Message] = Field(min_length=1)
        max_tokens: int | None = Field(None, ge=1)
        max_completion_tokens: int | None = Field(None, ge=1)
        temperature: float | None = Field(None, ge=0, le=2)
        top_p: float | None = Field(None, gt=0, le=1)
        n: int | None = Field(None, ge=1, le=max_n)
        stop: list[pydantic.constr(max_length=MAX_STOP_CHARS)] = Field(default_factory=list, max_length=MAX_STOP)
        seed: int | None = Field(None, ge=-INT64, lt=INT64)
        logprobs: bool | None = None
        stream: bool | None = None

        @field_validator("stop", mode="before")
        @classmethod
        def listed(cls, v: Any) -> Any:
            if v is None or isinstance(v, str | list):
                return [] if v is None else [v] if isinstance(v, str) else v
            raise ValueError(f"stop must be a string or a list of at most {MAX_STOP} strings")

        @field_validator("stream")
        @classmethod
        def not_streamed(cls, v: bool | None) -> bool | None:
            if v:
                raise ValueError("streaming is not supported by this server; send stream: false")
            return v

    return tool_request_model(ChatRequest, Message, strict) if tools else ChatRequest


MAX_TOOLS = 128
MAX_TOOL_CALLS = 64
MAX_NAME = 256


def tool_request_model(base: Any, message: Any, strict: Any) -> Any:
    """``base`` (the request model) with tools: see :func:`request_model`."""
    from pydantic import BaseModel, Field, field_validator, model_validator

    class Function(BaseModel):
        model_config = strict
        name: str = Field(min_length=1, max_length=MAX_NAME)
        arguments: str = "{}"

    class ToolCall(BaseModel):
        model_config = strict
        id: str = Field("", max_length=MAX_NAME)
        type: Literal["function"] = "function"
        function: Function

    class ToolMessage(message):
        content: str | None = None
        tool_calls: list[ToolCall] | None = Field(None, max_length=MAX_TOOL_CALLS)
        tool_call_id: str | None = Field(None, max_length=MAX_NAME)

        @field_validator("content", mode="before")
        @classmethod
        def text_of(cls, v: Any) -> Any:
            return v if v is None else message.text_of(v)

        @model_validator(mode="after")
        def said_something(self) -> Any:
            if self.content is None and not (self.role == "assistant" and self.tool_calls):
                raise ValueError("content is required, except on an assistant message with tool_calls")
            return self

    class Spec(BaseModel):
        model_config = strict
        name: str = Field(min_length=1, max_length=MAX_NAME)
        description: str | None = None
        parameters: dict[str, Any] | None = None

    class Tool(BaseModel):
        model_config = strict
        type: Literal["function"] = "function"
        function: Spec

    class ToolRequest(base):
        messages: list[ToolMessage] = Field(min_length=1)
        tools: list[Tool] | None = Field(None, max_length=MAX_TOOLS)
        tool_choice: Any = None
        stream_options: dict[str, Any] | None = None

        @field_validator("tool_choice")
        @classmethod
        def choice(cls, v: Any) -> Any:
            named = isinstance(v, dict) and isinstance((v.get("function") or {}).get("name"), str)
            if v is None or v in ("none", "auto", "required") or named:
                return v
            raise ValueError(
                'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}'
            )

        @field_validator("stream")
        @classmethod
        def not_streamed(cls, v: bool | None) -> bool | None:
            return v  # the proxy streams

    return ToolRequest


def refusal_of(errors: list[dict[str, Any]]) -> RequestRefused:
    """The OpenAI-style 400 for the first of pydantic's (or FastAPI's) validation errors."""
    e = errors[0] if errors else {"type": "missing", "loc": ("body",), "msg": "no body"}
    if e.get("type") == "json_invalid":
        return RequestRefused(400, f"The body is not valid JSON: {(e.get('ctx') or {}).get('error', e.get('msg'))}")
    path = [str(p) for p in e.get("loc", ()) if p != "body"]
    param = ".".join(path) or None
    message = str(e.get("msg", "invalid value")).removeprefix("Value error, ")
    if param is None:
        return RequestRefused(400, f"The body must be a JSON object with 'messages' ({message})")
    if e.get("type") == "missing":
        return RequestRefused(
            400, f"Missing required parameter: '{param}'", param=param, code="missing_required_parameter"
        )
    return RequestRefused(
        400,
        f"Invalid value for '{param}': {message} (got {reprlib.repr(e.get('input'))})",
        param=param,
        code="invalid_value",
    )


class ChatCompletions:
    """What the server does with a validated request: :meth:`prepare` bounds and tokenizes it into a :class:`Job`,
    :meth:`complete` queues it and answers in OpenAI's shape. ``max_context`` defaults to :func:`context_length`."""

    def __init__(
        self,
        backend: TokenBackend,
        chat: ChatTokenizer,
        model_name: str = "agentgym-r1",
        *,
        max_context: int | None = None,
        max_n: int = 8,
        max_queue: int = 64,
        chunk_tokens: int = 32,
        request_timeout_s: float = 300.0,
        default_max_tokens: int = 256,
        cached_requests: int = 4,
    ) -> None:
        context = context_length(backend, chat) if max_context is None else max_context
        for name, value in (
            ("max_context", context),
            ("max_n", max_n),
            ("default_max_tokens", default_max_tokens),
            ("max_queue", max_queue),
            ("chunk_tokens", chunk_tokens),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        if not (
            isinstance(request_timeout_s, int | float) and math.isfinite(request_timeout_s) and request_timeout_s > 0
        ):
            raise ConfigError(f"request_timeout_s must be a finite number > 0, got {request_timeout_s!r}")
        if not isinstance(cached_requests, int) or cached_requests < 0:
            raise ConfigError(f"cached_requests must be an int >= 0, got {cached_requests!r}")
        self.chat, self.model_name, self.context, self.max_n = chat, model_name, context, max_n
        self.request_timeout_s, self.default_max_tokens = float(request_timeout_s), default_max_tokens
        self.queue = GenerationQueue(
            backend, chat, max_jobs=max_queue, chunk_tokens=chunk_tokens, cached_jobs=cached_requests
        )
        # A token spans at most as many characters as the longest entry of the vocabulary, so messages longer than
        # context * that cannot fit and are refused without tokenizing them.
        self.max_prompt_chars = context * max(max((len(t) for t in chat.tokenizer.get_vocab()), default=1), 1)

    def health(self) -> dict[str, Any]:
        """What ``GET /health`` answers: the requests queued or in progress, and the bound on them."""
        return {"status": "ok", "requests": self.queue.pending(), "max_queue": self.queue.max_jobs}

    def prepare(self, request: Any) -> Job:
        """The job for a validated request; :class:`RequestRefused` when it cannot fit the model's context."""
        messages = [{"role": m.role, "content": utf8_safe(m.content)} for m in request.messages]
        self.bound(messages)
        return self.job_for(request, self.tokenized(messages))

    def bound(self, messages: list[dict[str, Any]]) -> None:
        """Refuse messages too long for the context, before tokenizing them."""
        context = self.context
        chars = sum(len(str(m.get("content") or "")) for m in messages)
        if chars > self.max_prompt_chars or len(messages) > context:
            raise RequestRefused(
                400,
                f"The messages ({len(messages)} of {chars:,} characters) are longer than this "
                f"model's maximum context length of {context} tokens can hold; shorten them",
                param="messages",
                code="context_length_exceeded",
            )

    def tokenized(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The prompt of ``messages``; a 400 when the template refuses them."""
        try:
            return self.chat.prompt_ids(messages, tools)
        except Exception as e:  # the template refuses these messages (roles out of order, a role it does not know)
            raise RequestRefused(
                400,
                f"The model's chat template cannot render these messages: {type(e).__name__}: {e}",
                param="messages",
            ) from e

    def job_for(self, request: Any, prompt: list[int], limit: int | None = None, limit_name: str = "") -> Job:
        """The job continuing ``prompt``: a 400 when ``prompt`` plus ``max_tokens`` passes the context (or ``limit``,
        a smaller bound that ``limit_name`` describes)."""
        context = self.context if limit is None else min(limit, self.context)
        what = limit_name if limit is not None and limit < self.context else "This model's maximum context length"
        asked = request.max_completion_tokens or request.max_tokens
        max_tokens = min(self.default_max_tokens, context - len(prompt)) if asked is None else asked
        if max_tokens < 1 or len(prompt) + max_tokens > context:
            wanted = max(max_tokens, 1)
            raise RequestRefused(
                400,
                f"{what} is {context} tokens. However, you "
                f"requested {len(prompt) + wanted} tokens ({len(prompt)} in the messages, "
                f"{wanted} in the completion). Please reduce the length of the messages or "
                f"max_tokens.",
                param="messages" if asked is None else "max_tokens",
                code="context_length_exceeded",
            )
        params = SamplingParams(
            max_new_tokens=max_tokens,
            stop=tuple(utf8_safe(s) for s in request.stop),
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
        )
        job = Job(prompt, request.n or 1, max_tokens, params, deadline=time.monotonic() + self.request_timeout_s)
        if request.seed is not None:
            job.seed = request.seed % INT64
        return job

    async def complete(self, request: Any) -> dict[str, Any]:
        """Prepare ``request`` (in a worker thread: tokenizing is work), queue it and wait for its rows."""
        from starlette.concurrency import run_in_threadpool

        job = await run_in_threadpool(self.prepare, request)
        return self.reply(request, job, await self.run(job))

    async def run(self, job: Job) -> list[Row]:
        """Queue ``job`` and wait for its rows (429 when the queue is full, 503 past the time limit)."""
        try:
            future = self.queue.submit(job)
        except QueueFull as e:
            raise RequestRefused(429, str(e), code="queue_full", kind="rate_limit_error") from e
        try:  # a cancelled wait (timeout, client gone) cancels the job: the worker drops it
            return await asyncio.wait_for(asyncio.wrap_future(future), self.request_timeout_s + 30)
        except (JobTimeout, TimeoutError) as e:
            raise RequestRefused(
                503,
                str(e) or f"the request did not finish within {self.request_timeout_s:g} s",
                code="timeout",
                kind="server_error",
            ) from e
        except QueueFull as e:
            raise RequestRefused(503, str(e), code="shutting_down", kind="server_error") from e

    def reply(self, request: Any, job: Job, rows: list[Row]) -> dict[str, Any]:
        choices = [self.choice(i, row, job.params.stop, bool(request.logprobs)) for i, row in enumerate(rows)]
        completion = sum(len(r.ids) for r in rows)
        return {
            "id": f"chatcmpl-{time.time_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(job.prompt),
                "completion_tokens": completion,
                "total_tokens": len(job.prompt) + completion,
            },
        }

    def choice(self, index: int, row: Row, stop: tuple[str, ...], logprobs: bool) -> dict[str, Any]:
        text = self.chat.decode_action(row.ids)
        if row.reason == "stop":  # OpenAI semantics: the reply ends before the stop sequence
            text = text[: min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))]
        out: dict[str, Any] = {
            "index": index,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "length" if row.reason in ("length", "context") else "stop",
        }
        if logprobs:  # OpenAI writes -9999.0 for a probability that underflows
            out["logprobs"] = {
                "content": [
                    {"token": str(i), "logprob": lp if math.isfinite(lp) else -9999.0, "top_logprobs": []}
                    for i, lp in zip(row.ids, row.logprobs, strict=True)
                ]
            }
        return out


def make_app(backend: TokenBackend, chat: ChatTokenizer, model_name: str = "agentgym-r1", **limits: Any) -> Any:
    """A FastAPI app serving ``backend`` under the OpenAI chat-completions API; ``limits`` are those of
    :class:`ChatCompletions` (``max_context``, ``max_n``, ``max_queue``, ``chunk_tokens``, ``request_timeout_s``,
    ``default_max_tokens``, ``cached_requests``: how many requests in progress keep their own key/value cache
    between chunks, with the transformers backend). See the module docstring for the bounds."""
    fastapi = require("fastapi", "serve", "the OpenAI-compatible server")
    service = ChatCompletions(backend, chat, model_name, **limits)
    ChatRequest = request_model(service.max_n)
    app = app_for(service, "agentgym-r1 chat completions")

    @app.post("/v1/chat/completions")
    async def completions(request: ChatRequest) -> Any:
        return fastapi.responses.JSONResponse(await service.complete(request))

    return app


def app_for(service: ChatCompletions, title: str) -> Any:
    """The FastAPI app around ``service`` without its completions route: OpenAI-style errors (400 for validation,
    413 past the body bound), ``GET /health`` and ``GET /v1/models``, and the queue closed at shutdown."""
    fastapi = require("fastapi", "serve", "the OpenAI-compatible server")
    from fastapi.exceptions import RequestValidationError
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException

    from agentgym_r1.core.http import limit_body

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        await run_in_threadpool(service.queue.close)

    app = fastapi.FastAPI(title=title, lifespan=lifespan)

    @app.exception_handler(RequestRefused)
    def refused(request: Any, exc: RequestRefused) -> Any:
        return fastapi.responses.JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    def invalid(request: Any, exc: Any) -> Any:
        return refused(request, refusal_of(exc.errors()))

    @app.exception_handler(HTTPException)
    def http_error(request: Any, exc: Any) -> Any:
        return refused(request, RequestRefused(exc.status_code, str(exc.detail)))

    @app.get("/health")
    def health() -> dict[str, Any]:
        return service.health()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": service.model_name,
                    "object": "model",
                    "owned_by": "agentgym-r1",
                    "max_model_len": service.context,
                }
            ],
        }

    answer = json.dumps(RequestRefused(413, "The request body is too large for this server's context").body())
    # Starlette builds each middleware as ``cls(app, **options)``: limit_body(app, ...) wraps the app the same way
    app.add_middleware(limit_body, max_bytes=6 * service.max_prompt_chars + 2**20, answer=answer.encode())
    app.state.service = service
    return app
