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

from agentgym_r1.core.http import invalid_without_input, limit_body
from agentgym_r1.error import RetrievalError, require
from agentgym_r1.retrieval.base import Hit, Retriever

__all__ = ["MAX_BATCH", "MAX_BODY_BYTES", "MAX_K", "create_app", "hit_to_dict", "serve"]

MAX_BATCH = 512
MAX_K = 100
MAX_BODY_BYTES = 8 * 2**20  # 512 queries of 16 KiB; a larger body is refused before it fills the server's memory
TOO_LARGE = b'{"detail": "request body over %d bytes; send fewer or shorter queries"}' % MAX_BODY_BYTES


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

    return limit_body(app, MAX_BODY_BYTES, TOO_LARGE)


def serve(
    index_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning", **opts: Any
) -> None:
    """Load the index in ``index_dir`` and serve it until interrupted."""
    from agentgym_r1.retrieval.factory import load_retriever

    uvicorn = require("uvicorn", "serve", "The retriever server")
    retriever = load_retriever(index_dir, cache=False, **opts)
    try:
        uvicorn.run(create_app(retriever), host=host, port=port, log_level=log_level)
    finally:
        retriever.close()
