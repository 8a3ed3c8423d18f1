"""A client of the retriever server (``agentgym-r1 serve retriever``), with pooled connections, timeouts and retries.

A server that is down, slow or failing raises :class:`RetrievalError` after ``retries`` more tries; envs turn that
into an error observation, so an episode never crashes because the server is away.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agentgym_r1.error import RetrievalError, require
from agentgym_r1.retrieval.base import Document, Hit, Retriever

__all__ = ["HttpRetriever"]


class HttpRetriever(Retriever):
    """Search through ``POST {url}/retrieve``. Thread-safe: one pooled ``httpx.Client`` serves every thread."""

    backend = "http"

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 2, backoff: float = 0.1,
                 max_connections: int = 32) -> None:
        httpx = require("httpx", "serve", "The HTTP retriever")
        self._httpx = httpx
        self.url = url.rstrip("/")
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self._client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(timeout),
                                    limits=httpx.Limits(max_connections=max_connections,
                                                        max_keepalive_connections=max_connections))

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        httpx = self._httpx
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = self._client.request(method, path, json=payload)
            except httpx.TimeoutException as e:
                last = f"timed out ({type(e).__name__})"
                continue
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code != 200:
                raise RetrievalError(f"retriever at {self.url} refused the request: HTTP {response.status_code} "
                                     f"{response.text[:200]}")
            return response.json()
        raise RetrievalError(f"retriever at {self.url} did not answer after {self.retries + 1} tries: {last}")

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        if not queries:
            return []
        data = self._request("POST", "/retrieve", {"queries": [str(q) for q in queries], "k": int(k)})
        try:
            return [[Hit(Document(str(h["id"]), h["title"], h["text"]), float(h["score"]), int(h["rank"]))
                     for h in hits] for hits in data["results"]]
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
