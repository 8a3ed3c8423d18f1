"""The retriever server on loopback (a real uvicorn subprocess) and its HTTP client: answers, then fails cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentgym_r1.error import RetrievalError
from agentgym_r1.retrieval import build_retriever
from tests.retrieval.conftest import BAD_QUERIES, QUERIES, SMALL_DOCS

pytest.importorskip("tantivy")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from agentgym_r1.retrieval.http import HttpRetriever  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {proc.stderr.read()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError("server did not become healthy")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    index = tmp_path_factory.mktemp("served") / "idx"
    build_retriever("bm25", SMALL_DOCS, index, cache=False).close()
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentgym_r1.cli",
            "serve",
            "retriever",
            "--index",
            str(index),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_health_and_batched_retrieve(server):
    url, _ = server
    with HttpRetriever(url, timeout=5.0) as client:
        assert client.health() == {"status": "ok", "backend": "bm25", "num_docs": len(SMALL_DOCS)}
        assert len(client) == len(SMALL_DOCS)
        results = client.batch_search([q for q, _ in QUERIES], k=2)
        assert [hits[0].doc.id for hits in results] == [doc_id for _, doc_id in QUERIES]
        assert client.search("Zürich Switzerland", k=1)[0].doc == SMALL_DOCS[4]


def test_bad_queries_over_http_never_fail(server):
    url, _ = server
    with HttpRetriever(url, timeout=5.0) as client:
        results = client.batch_search(BAD_QUERIES, k=3)
        assert len(results) == len(BAD_QUERIES)
        assert all(len(hits) <= 3 for hits in results)


def test_malformed_request_is_refused_not_retried(server):
    url, _ = server
    response = httpx.post(f"{url}/retrieve", json={"queries": "not a list", "k": 5}, timeout=5.0)
    assert response.status_code == 422
    response = httpx.post(f"{url}/retrieve", json={"queries": ["x"], "k": 10_000}, timeout=5.0)
    assert response.status_code == 422


def test_pooled_client_is_thread_safe(server):
    url, _ = server
    errors: list[BaseException] = []
    with HttpRetriever(url, timeout=5.0) as client:

        def work(i: int) -> None:
            try:
                query, doc_id = QUERIES[i % len(QUERIES)]
                assert client.search(query, k=1)[0].doc.id == doc_id
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_server_down_raises_retrieval_error_quickly(server):
    url, proc = server
    client = HttpRetriever(url, timeout=2.0, retries=2, backoff=0.05)
    assert client.search("coral reef")[0].doc.id == "d6"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 0  # clean shutdown
    start = time.monotonic()
    with pytest.raises(RetrievalError, match="did not answer after 3 tries"):
        client.search("coral reef")
    assert time.monotonic() - start < 2.0
    client.close()


def test_slow_server_times_out_as_retrieval_error():
    with socket.socket() as listener:  # accepts connections and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = HttpRetriever(f"http://127.0.0.1:{port}", timeout=0.3, retries=1, backoff=0.0)
        start = time.monotonic()
        with pytest.raises(RetrievalError, match="timed out"):
            client.search("anything")
        assert time.monotonic() - start < 3.0
        client.close()


def test_failing_backend_answers_503():
    from fastapi.testclient import TestClient

    from agentgym_r1.retrieval.base import Retriever
    from agentgym_r1.retrieval.server import create_app

    class Broken(Retriever):
        backend = "broken"

        def batch_search(self, queries, k=5):
            raise RetrievalError("index is gone")

        def __len__(self):
            return 0

    with TestClient(create_app(Broken())) as tc:
        response = tc.post("/retrieve", json={"queries": ["x"], "k": 1})
        assert response.status_code == 503
        assert "index is gone" in response.json()["detail"]


def test_non_finite_k_and_oversized_bodies_are_refused_not_500():
    from fastapi.testclient import TestClient

    from agentgym_r1.retrieval.server import MAX_BODY_BYTES, create_app

    retriever = build_retriever("bm25", SMALL_DOCS, cache=False)
    with TestClient(create_app(retriever), raise_server_exceptions=False) as tc:
        for k in ("NaN", "Infinity", "1e400", "-1e400"):
            response = tc.post(
                "/retrieve",
                content='{"queries": ["reef"], "k": ' + k + "}",
                headers={"content-type": "application/json"},
            )
            assert response.status_code == 422, (k, response.text)
        big = b'{"queries": ["' + b"a" * (MAX_BODY_BYTES + 1) + b'"]}'
        assert tc.post("/retrieve", content=big, headers={"content-type": "application/json"}).status_code == 413

        def streamed():  # no Content-Length: counted as it arrives
            yield b'{"queries": ["'
            for _ in range(MAX_BODY_BYTES // 2**20 + 2):
                yield b"a" * 2**20
            yield b'"]}'

        assert tc.post("/retrieve", content=streamed(), headers={"content-type": "application/json"}).status_code in (
            400,
            413,
        )
        lone = tc.post(
            "/retrieve", content='{"queries": ["reef\\ud800"], "k": 1}', headers={"content-type": "application/json"}
        )
        assert lone.status_code == 200 and lone.json()["results"][0]
