"""A real uvicorn server on loopback, in a thread of the test process (so envs may take Python kwargs such as tools)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


def skip_without_serve() -> None:
    """Skip the calling test module unless the ``serve`` extra (openenv-core, uvicorn, httpx) is installed."""
    import pytest

    for module in ("openenv.core", "uvicorn", "httpx"):
        pytest.importorskip(module, reason='needs the serve extra: pip install "agentgym-r1[serve]"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, seconds: float, what: str) -> None:
    """Poll ``predicate`` until it holds; a generous bound far from the expected time, not a timing assertion."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {seconds} s")


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """Run the ASGI ``app`` with uvicorn on a free loopback port, in a thread; yields ``http://127.0.0.1:PORT``."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "server start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextlib.contextmanager
def served(env_id: str, env_kwargs: dict[str, Any] | None = None, **opts: Any) -> Iterator[str]:
    """Serve ``env_id`` with :func:`make_app` on a free loopback port; yields the base url."""
    from agentgym_r1.serve.openenv_server import make_app

    with serving(make_app(env_id, env_kwargs, **opts)) as url:
        yield url


def sessions(url: str) -> dict[str, Any]:
    import httpx

    return httpx.get(f"{url}/sessions", timeout=5).json()
