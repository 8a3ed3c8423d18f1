"""What every HTTP server of the package shares (the retriever server, the env server, the model server): a bound
on request bodies and a 422 that never echoes the input back. FastAPI and Starlette are imported only when used."""

from __future__ import annotations

from typing import Any


class _BodyTooLarge(Exception):
    pass


def limit_body(app: Any, max_bytes: int, answer: bytes) -> Any:
    """ASGI middleware: 413 for a declared ``Content-Length`` over ``max_bytes``; a streamed body is counted as it
    arrives and the request fails once it passes ``max_bytes`` (Starlette reads the whole body into memory first).
    ``answer`` is the JSON body of the 413."""

    async def too_large(send: Any) -> None:
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
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
