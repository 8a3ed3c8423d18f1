"""The OpenAI-compatible server (``adapters.serve``) under hostile requests, served for real by uvicorn on loopback:
every malformed field is an OpenAI-style 400, the prompt and ``max_tokens`` are bounded by the model's context, ``n``
is served, and one long request does not hold the others (a bounded queue, chunked generation, a time limit)."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from tests.serve.conftest import serving, wait_until  # noqa: E402

HI = [{"role": "user", "content": "Hi"}]
# A prompt of about 1,840 tokens with the tiny tokenizer: the rest of the 2,048-token context is the completion.
LONG = [{"role": "user", "content": "What is 12 plus 7? " * 100}]


@pytest.fixture(scope="module")
def app_for(model, chat):
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.serve import make_app

    return lambda **opts: make_app(HFBackend(model, chat), chat, "tiny", **opts)


@pytest.fixture(scope="module")
def url(app_for):
    with serving(app_for(chunk_tokens=8)) as base:
        yield base + "/v1/chat/completions"


def post(url: str, body: object, timeout: float = 60) -> httpx.Response:
    # json.dumps writes NaN and lone surrogates as Python's json reader takes them, as a hostile client would send
    return httpx.post(url, content=json.dumps(body), headers={"content-type": "application/json"}, timeout=timeout)


MALFORMED = [
    ({"messages": HI, "max_tokens": -5}, "max_tokens"),
    ({"messages": HI, "max_tokens": "abc"}, "max_tokens"),
    ({"messages": HI, "max_tokens": 0}, "max_tokens"),
    ({"messages": HI, "max_tokens": 2.5}, "max_tokens"),
    ({"messages": HI, "max_completion_tokens": -1}, "max_completion_tokens"),
    ({"messages": HI, "temperature": -1}, "temperature"),
    ({"messages": HI, "temperature": float("nan")}, "temperature"),
    ({"messages": HI, "temperature": float("inf")}, "temperature"),
    ({"messages": HI, "temperature": "hot"}, "temperature"),
    ({"messages": HI, "top_p": 0}, "top_p"),
    ({"messages": HI, "top_p": 1.5}, "top_p"),
    ({"messages": HI, "stop": 5}, "stop"),
    ({"messages": HI, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"messages": HI, "stop": ["x" * 1000]}, "stop.0"),
    ({"messages": HI, "seed": 2**70}, "seed"),
    ({"messages": HI, "seed": "1"}, "seed"),
    ({"messages": HI, "n": 0}, "n"),
    ({"messages": HI, "n": 1000}, "n"),
    ({"messages": HI, "n": True}, "n"),
    ({"messages": HI, "logprobs": "yes"}, "logprobs"),
    ({"messages": HI, "stream": True}, "stream"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": None}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages.0.content"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
    ({"messages": [{"content": "hi"}]}, "messages.0.role"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [5]}, "messages.0"),
    ({"max_tokens": 5}, "messages"),
    ([1, 2], None),
    (5, None),
    ("hi", None),
]


@pytest.mark.parametrize(("body", "param"), MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_every_malformed_field_is_an_openai_400(url, body, param):
    r = post(url, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_bodies_that_are_not_json_objects_are_400s(url):
    for content in (b"not json", b"", b'{"messages": [], "max_tokens": 1' + b"0" * 5000 + b"}", b"\xff\xfe"):
        r = httpx.post(url, content=content, headers={"content-type": "application/json"}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["message"], (content[:20], r.text)


def test_a_body_past_what_the_context_can_hold_is_413_unread(url):
    r = post(url, {"messages": [{"role": "user", "content": "x" * 5_000_000}]}, timeout=30)
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"


def test_prompt_and_max_tokens_are_bounded_by_the_context(url):
    huge = post(url, {"messages": [{"role": "user", "content": "x" * 1_000_000}]}, timeout=30)
    assert huge.status_code == 400
    assert huge.json()["error"]["code"] == "context_length_exceeded" and "2048" in huge.json()["error"]["message"]
    endless = post(url, {"messages": HI, "max_tokens": 10**9}, timeout=30)
    assert endless.status_code == 400 and endless.json()["error"]["param"] == "max_tokens"
    assert "maximum context length is 2048 tokens" in endless.json()["error"]["message"]
    over = post(url, {"messages": LONG, "max_tokens": 300}, timeout=30)  # fine alone, over the context with the prompt
    assert over.status_code == 400 and over.json()["error"]["code"] == "context_length_exceeded"
    rest = post(url, {"messages": LONG, "temperature": 0}, timeout=120).json()  # no max_tokens: what is left
    assert rest["usage"]["total_tokens"] <= 2048 and rest["choices"][0]["finish_reason"] in ("length", "stop")


def test_n_choices_are_generated(url):
    r = post(url, {"messages": HI, "n": 3, "max_tokens": 6, "logprobs": True, "seed": 1})
    body = r.json()
    assert r.status_code == 200 and [c["index"] for c in body["choices"]] == [0, 1, 2]
    lengths = [len(c["logprobs"]["content"]) for c in body["choices"]]
    assert body["usage"]["completion_tokens"] == sum(lengths) and all(1 <= n <= 6 for n in lengths)
    assert len({c["message"]["content"] for c in body["choices"]}) > 1  # sampled independently


def test_a_lone_surrogate_in_the_content_is_served(url):
    r = post(url, {"messages": [{"role": "user", "content": "a\ud800b"}], "max_tokens": 3})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None


def test_hostile_requests_do_not_hold_a_small_one(url):
    """The issue's reproductions: a 1 MB prompt and max_tokens=10**9 held the server for minutes."""
    replies: list[int] = []
    hostile = [
        {"messages": [{"role": "user", "content": "x" * 1_000_000}], "max_tokens": 16},
        {"messages": HI, "max_tokens": 10**9},
    ]
    threads = [
        threading.Thread(target=lambda b=b: replies.append(post(url, b, timeout=600).status_code)) for b in hostile
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    small = post(url, {"messages": HI, "max_tokens": 4}, timeout=30)  # a generous bound: not stalled
    assert small.status_code == 200
    for t in threads:
        t.join(60)
    assert sorted(replies) == [400, 400]


def _start_long(url: str, out: dict) -> threading.Thread:
    """Send the longest legal request (8 choices filling the context, greedy) in a thread; its reply goes to ``out``."""

    def run() -> None:
        out["long"] = post(url, {"messages": LONG, "n": 8, "temperature": 0}, timeout=300)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_small_request_is_answered_while_a_long_one_is_in_flight(url):
    out: dict = {}
    thread = _start_long(url, out)
    time.sleep(0.5)
    small = post(url, {"messages": HI, "max_tokens": 4}, timeout=30)
    in_flight = thread.is_alive()
    thread.join(300)
    assert small.status_code == 200 and out["long"].status_code == 200
    assert in_flight, "the small request was answered only after the long one"
    assert out["long"].json()["usage"]["completion_tokens"] > 800  # it was long: its 8 choices ran past 100 tokens


def test_the_queue_is_bounded_and_each_request_has_a_time_limit(app_for):
    # Two servers, so neither check races the machine's speed: with a long time limit the longest legal request holds
    # the one queue place for its whole generation (seconds), so a second request gets 429; with a 0.2 s limit the
    # same request (a 1,841-token prefill, then 26 turns of 8 tokens for 8 choices) is stopped at a turn past it.
    with serving(app_for(chunk_tokens=8, max_queue=1, request_timeout_s=120)) as base:
        url, out = base + "/v1/chat/completions", {}
        thread = _start_long(url, out)
        wait_until(lambda: httpx.get(f"{base}/health", timeout=5).json()["requests"] == 1, 30, "the long request")
        full = post(url, {"messages": HI, "max_tokens": 2})
        thread.join(120)
    assert full.status_code == 429 and full.json()["error"]["type"] == "rate_limit_error"
    with serving(app_for(chunk_tokens=8, max_queue=1, request_timeout_s=0.2)) as base:
        url, out = base + "/v1/chat/completions", {}
        _start_long(url, out).join(120)
        after = post(url, {"messages": HI, "max_tokens": 2})
    long = out["long"]
    assert long.status_code == 503 and long.json()["error"]["code"] == "timeout", long.text[:300]
    assert after.status_code == 200  # the worker went on


def test_bad_server_limits_are_refused_before_serving(app_for):
    from agentgym_r1.error import ConfigError

    for bad in (
        {"max_n": 0},
        {"max_context": -1},
        {"request_timeout_s": float("nan")},
        {"request_timeout_s": 0},
        {"max_queue": 0},
        {"chunk_tokens": 0},
        {"default_max_tokens": True},
        {"cached_requests": -1},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            app_for(**bad)


def test_requests_served_in_turns_continue_from_their_own_caches(app_for):
    """Two greedy requests served in turns, chunk by chunk: the same completions whether each keeps its own key/value
    cache between chunks or prefills its whole context every chunk."""
    bodies = [
        {"messages": LONG, "max_tokens": 40, "n": 2, "temperature": 0},
        {"messages": HI, "max_tokens": 40, "temperature": 0},
    ]
    texts = {}
    for cached in (0, 4):
        with serving(app_for(chunk_tokens=4, cached_requests=cached)) as base:
            replies: dict[int, httpx.Response] = {}
            threads = [
                threading.Thread(
                    target=lambda i=i, b=b, got=replies: got.update({i: post(f"{base}/v1/chat/completions", b)})
                )
                for i, b in enumerate(bodies)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        texts[cached] = [[c["message"]["content"] for c in replies[i].json()["choices"]] for i in range(2)]
    assert texts[0] == texts[4]
