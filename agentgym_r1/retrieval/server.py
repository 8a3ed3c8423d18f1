"""The retriever server: one shared index behind HTTP for many rollout workers (extra ``serve``).

``agentgym-r1 serve retriever --index DIR`` runs :func:`create_app` with uvicorn. Endpoints:

- ``POST /retrieve`` with ``{"queries": ["...", ...], "k": 5}`` answers
  ``{"results": [[{"id", "title", "text", "score", "rank"}, ...], ...]}``, one list per query, in order.
- ``GET /health`` answers ``{"status": "ok", "backend": ..., "num_docs": ...}``.

A search the backend cannot answer gives HTTP 503 with the reason; a malformed request gives 422 (also for
``k`` NaN or out of range, which JSON readers accept); a body over ``MAX_BODY_BYTES`` gives 413 without being read
on.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the request model from the live annotations of
# endpoints defined inside create_app.
from pathlib import Path
from typing import Any

from agentgym_r1.error import RetrievalError, require
from agentgym_r1.retrieval.base import Hit, Retriever

__all__ = ["MAX_BATCH", "MAX_BODY_BYTES", "MAX_K", "create_app", "hit_to_dict", "invalid_without_input",
           "limit_body", "serve"]

MAX_BATCH = 512
MAX_K = 100
MAX_BODY_BYTES = 8 * 2**20  # 512 queries of 16 KiB; a larger body is refused before it fills the server's memory


class _BodyTooLarge(Exception):
    pass


def limit_body(app: Any, max_bytes: int = MAX_BODY_BYTES, answer: bytes | None = None) -> Any:
    """ASGI middleware: 413 for a declared ``Content-Length`` over ``max_bytes``; a streamed body is counted as it
    arrives and the request fails once it passes ``max_bytes`` (Starlette reads the whole body into memory first).
    ``answer`` is the JSON body of the 413 (default: ``{"detail": ...}``)."""
    if answer is None:
        answer = b'{"detail": "request body over %d bytes; send fewer or shorter queries"}' % max_bytes

    async def too_large(send: Any) -> None:
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})

    async def limited(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            return await too_large(send)
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > max_bytes:
                raise _BodyTooLarge
            return message

        try:
            await app(scope, counted, send)
        except _BodyTooLarge:
            await too_large(send)
        return None

    return limited


def invalid_without_input(request: Any, exc: Any) -> Any:
    """A FastAPI handler for ``RequestValidationError``: 422 with each error's place and message. FastAPI's default
    echoes the input back, and a NaN, an infinity or a lone surrogate in it cannot be written as JSON, which made the
    answer a 500."""
    from fastapi.responses import JSONResponse

    errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)


def hit_to_dict(hit: Hit) -> dict[str, Any]:
    return {"id": hit.doc.id, "title": hit.doc.title, "text": hit.doc.text, "score": hit.score, "rank": hit.rank}


def create_app(retriever: Retriever) -> Any:
    """A FastAPI app serving ``retriever``."""
    fastapi = require("fastapi", "serve", "The retriever server")
    pydantic = require("pydantic", "serve", "The retriever server")

    class RetrieveRequest(pydantic.BaseModel):
        queries: list[str] = pydantic.Field(max_length=MAX_BATCH)
        k: int = pydantic.Field(default=5, ge=0, le=MAX_K)

    app = fastapi.FastAPI(title="agentgym-r1 retriever", version="1")

    app.add_exception_handler(fastapi.exceptions.RequestValidationError, invalid_without_input)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "backend": retriever.backend, "num_docs": len(retriever)}

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict[str, Any]:
        try:
            results = retriever.batch_search(request.queries, request.k)
        except RetrievalError as e:
            raise fastapi.HTTPException(status_code=503, detail=str(e)) from e
        return {"results": [[hit_to_dict(h) for h in hits] for hits in results]}

    return limit_body(app)


def serve(index_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning",
          **opts: Any) -> None:
    """Load the index in ``index_dir`` and serve it until interrupted."""
    from agentgym_r1.retrieval.factory import load_retriever

    uvicorn = require("uvicorn", "serve", "The retriever server")
    retriever = load_retriever(index_dir, cache=False, **opts)
    try:
        uvicorn.run(create_app(retriever), host=host, port=port, log_level=log_level)
    finally:
        retriever.close()
