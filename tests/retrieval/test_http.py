"""The retriever client against a server that is not there (a closed port) or hangs (a socket that never answers):
a step's searches cost about one timeout together, then error observations; the episode goes on."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

pytest.importorskip("httpx")

from agentgym_r1.envs.hotpotqa.env import HotpotQAEnv
from agentgym_r1.error import ConfigError, RetrievalError
from agentgym_r1.retrieval.http import HttpRetriever

THREE_SEARCHES = "".join(
    f"<tool_call>{json.dumps({'name': 'search', 'arguments': {'query': q}})}</tool_call>"
    for q in ("first entity", "second entity", "third entity")
)


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening, then closed: connections to it are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """A server on 127.0.0.1 that accepts connections, reads nothing and never answers (a hung process); yields its
    port and the connections it accepted so far."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        deadline = time.monotonic() + 120  # bounded even if the test never stops it
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(timeout=10)
        for conn in accepted:
            conn.close()
        listener.close()


def _env(port: int, **options: float) -> HotpotQAEnv:
    return HotpotQAEnv(retriever="http", retriever_options={"url": f"http://127.0.0.1:{port}", **options})


def test_a_step_of_three_searches_against_a_closed_port_says_unreachable_and_goes_on():
    env = _env(_closed_port(), timeout=2.0)
    env.reset(seed=0)
    start = time.monotonic()
    obs, _, terminated, truncated, _ = env.step(THREE_SEARCHES)
    assert time.monotonic() - start < 10  # not stalled (about one timeout at most; it was 3 tries x 3 searches)
    assert obs.count("unreachable") == 3 and not (terminated or truncated)
    _, _, terminated, _, _ = env.step("<answer>nobody</answer>")  # the episode goes on to its answer
    assert terminated
    env.close()


def test_a_hung_server_costs_one_timeout_per_step_not_one_per_try_and_search():
    with _silent_server() as (port, accepted):
        env = _env(port, timeout=1.0)  # the cooldown is the timeout
        env.reset(seed=0)
        start = time.monotonic()
        obs, *_ = env.step(THREE_SEARCHES)
        assert len(accepted) == 1  # one try: the step's other searches did not ask again (it was 3 x 3 tries)
        assert obs.count("unreachable") == 3 and "timed out" in obs
        assert time.monotonic() - start < 8  # not stalled: about one timeout (it was 9.9 s)
        time.sleep(1.1)  # past the cooldown: the next step asks again
        obs, *_ = env.step(THREE_SEARCHES)
        assert obs.count("unreachable") == 3 and len(accepted) == 2
        env.close()


def test_refused_connections_get_a_short_bounded_retry():
    client = HttpRetriever(f"http://127.0.0.1:{_closed_port()}", timeout=30.0, retries=2, backoff=0.05)
    start = time.monotonic()
    with pytest.raises(RetrievalError, match=r"unreachable \(did not answer after 3 tries"):
        client.search("anything")
    assert time.monotonic() - start < 10  # three quick tries, not three timeouts
    with pytest.raises(RetrievalError, match="it is asked again"):  # within the cooldown: no try at all
        client.search("anything else")
    client.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("timeout", 0),
        ("timeout", float("inf")),
        ("timeout", "2"),
        ("retries", -1),
        ("retries", 1.5),
        ("backoff", float("nan")),
        ("cooldown", -1),
    ],
)
def test_bad_client_options_are_refused(option, value):
    with pytest.raises(ConfigError, match=option):
        HttpRetriever("http://127.0.0.1:1", **{option: value})
