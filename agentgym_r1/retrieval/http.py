"""A client of the retriever server (``agentgym-r1 serve retriever``), with pooled connections, one deadline per
search and short retries.

A search gets ``timeout`` seconds in all: its tries (``retries`` more after the first, with ``backoff`` between them:
a refused connection or a 5xx answer) share that deadline, so a server that hangs costs one timeout, not one per try.
A server that did not answer in time, or refused the connection, is then taken as unreachable for ``cooldown``
seconds (default ``timeout``): the searches in that window (the rest of the step's searches) raise
:class:`RetrievalError` at once, so a step with several searches against a dead server costs about one timeout, and
the next step tries again. Envs turn the error into an error observation, so an episode never crashes because the
server is away.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentgym_r1.core.retry import retry_call
from agentgym_r1.error import ConfigError, RetrievalError, require
from agentgym_r1.retrieval.base import Document, Hit, Retriever

__all__ = ["HttpRetriever"]


class _Failed(Exception):
    """One try that got no usable answer; ``unreachable`` when the server could not be reached or did not answer."""

    def __init__(self, reason: str, unreachable: bool) -> None:
        super().__init__(reason)
        self.unreachable = unreachable


def _seconds(name: str, value: Any, positive: bool = True) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise ConfigError(
            f"HttpRetriever {name} must be a finite number of seconds {'> 0' if positive else '>= 0'}, got {value!r}"
        )
    return float(value)


class HttpRetriever(Retriever):
    """Search through ``POST {url}/retrieve``. Thread-safe: one pooled ``httpx.Client`` serves every thread (and the
    unreachable window is shared by them: a dead server is found out once for all of them)."""

    backend = "http"

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.1,
        max_connections: int = 32,
        cooldown: float | None = None,
    ) -> None:
        httpx = require("httpx", "serve", "The HTTP retriever")
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ConfigError(f"HttpRetriever retries must be an int >= 0, got {retries!r}")
        self._httpx = httpx
        self.url = url.rstrip("/")
        self.timeout = _seconds("timeout", timeout)
        self.retries = retries
        self.backoff = _seconds("backoff", backoff, positive=False)
        self.cooldown = self.timeout if cooldown is None else _seconds("cooldown", cooldown, positive=False)
        self._down: tuple[float, str] | None = None  # (until, why): set when the server could not be reached
        self._lock = threading.Lock()
        self._client = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        with self._lock:
            down = self._down
        if down is not None and time.monotonic() < down[0]:
            raise RetrievalError(
                f"retriever at {self.url} is unreachable ({down[1]}); it is asked again "
                f"{down[0] - time.monotonic():.1f} s from now"
            )
        deadline = time.monotonic() + self.timeout
        tries = 0

        def attempt() -> Any:
            nonlocal tries
            tries += 1
            return self._try(method, path, payload, deadline)

        try:
            data = retry_call(
                attempt,
                retry_if=lambda e: isinstance(e, _Failed),
                attempts=self.retries + 1,
                within=self.timeout,
                first_wait=self.backoff,
                max_wait=max(self.backoff, 1.0),
            )
        except _Failed as e:
            why = f"did not answer after {tries} {'try' if tries == 1 else 'tries'} in {self.timeout:g} s: {e}"
            if e.unreachable:
                with self._lock:
                    self._down = (time.monotonic() + self.cooldown, why)
                raise RetrievalError(f"retriever at {self.url} is unreachable ({why})") from None
            raise RetrievalError(f"retriever at {self.url} {why}") from None
        with self._lock:
            self._down = None
        return data

    def _try(self, method: str, path: str, payload: dict[str, Any] | None, deadline: float) -> Any:
        """One request within what is left of the search's deadline."""
        httpx = self._httpx
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Failed("timed out", unreachable=True)
        try:
            response = self._client.request(method, path, json=payload, timeout=left)
        except httpx.TimeoutException as e:
            raise _Failed(f"timed out ({type(e).__name__})", unreachable=True) from None
        except httpx.TransportError as e:  # refused, reset, DNS: nothing answered
            raise _Failed(f"{type(e).__name__}: {e}", unreachable=True) from None
        except httpx.HTTPError as e:
            raise _Failed(f"{type(e).__name__}: {e}", unreachable=False) from None
        if response.status_code >= 500:
            raise _Failed(f"HTTP {response.status_code}: {response.text[:200]}", unreachable=False)
        if response.status_code != 200:
            raise RetrievalError(
                f"retriever at {self.url} refused the request: HTTP {response.status_code} {response.text[:200]}"
            )
        try:
            return response.json()
        except ValueError as e:
            raise RetrievalError(f"retriever at {self.url} sent an answer that is not JSON: {e}") from e

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        if not queries:
            return []
        data = self._request("POST", "/retrieve", {"queries": [str(q) for q in queries], "k": int(k)})
        try:
            return [
                [Hit(Document(str(h["id"]), h["title"], h["text"]), float(h["score"]), int(h["rank"])) for h in hits]
                for hits in data["results"]
            ]
        except (KeyError, TypeError, ValueError) as e:
            raise RetrievalError(f"retriever at {self.url} sent an answer in an unknown shape: {e!r}") from e

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.batch_search([query], k)[0]

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def __len__(self) -> int:
        return int(self.health()["num_docs"])

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
