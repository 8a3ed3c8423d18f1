"""The OpenAI-compatible backend against a real HTTP server on loopback that serves the tiny model."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from agentgym_r1.adapters import Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.openai import restore_stop

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("httpx")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(model, chat):
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.serve import make_app

    port = _free_port()
    srv = uvicorn.Server(
        uvicorn.Config(make_app(HFBackend(model, chat), chat, "tiny"), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "the test server did not start"
    yield f"http://127.0.0.1:{port}/v1"
    srv.should_exit = True
    thread.join(10)


def test_episodes_are_played_through_chat_completions(server):
    from agentgym_r1.adapters.backends.openai import OpenAIBackend

    backend = OpenAIBackend(server, "tiny", max_concurrency=4)
    config = RolloutConfig(samples_per_prompt=2, max_turns=2, sampling=SamplingParams(max_new_tokens=8))
    batch = RolloutEngine(backend, None, config).rollout(
        [Prompt("AgentR1/GSM8K-v0", {"source": "synthetic"}, seed=s) for s in (1, 2)]
    )
    backend.close()
    assert len(batch.episodes) == 4 and batch.samples == []  # evaluation: no token rows
    for ep in batch.episodes:
        assert ep.text_only and ep.end_reason in ("max_turns", "terminated") and ep.error is None
        assert 1 <= len(ep.turns) <= 2
        for turn in ep.turns:
            assert turn.finish_reason in ("stop", "length") and turn.logprobs and all(lp <= 0 for lp in turn.logprobs)
        assert ep.messages[2] == {"role": "assistant", "content": ep.turns[0].action}
    assert batch.metrics()["rollout/turns"] > 0


def test_the_server_follows_openai_stop_semantics(server, tokenizer):
    import httpx

    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "What is 2 + 3?"}],
        "max_tokens": 16,
        "temperature": 0,
    }
    free = httpx.post(f"{server}/chat/completions", json=body, timeout=60).json()["choices"][0]
    text = free["message"]["content"]
    assert free["finish_reason"] == "length" and text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    stopped = httpx.post(f"{server}/chat/completions", json={**body, "stop": [stop]}, timeout=60).json()
    choice = stopped["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"] == text[: text.find(stop)]


def test_a_server_that_is_down_ends_episodes_with_generation_error():
    from agentgym_r1.adapters.backends.openai import OpenAIBackend

    backend = OpenAIBackend(f"http://127.0.0.1:{_free_port()}/v1", "tiny", timeout=2)
    batch = RolloutEngine(backend).rollout([Prompt("AgentR1/GSM8K-v0", {"source": "synthetic"}, seed=1)])
    (ep,) = batch.episodes
    assert ep.end_reason == "generation_error" and "Connect" in ep.error


def test_dropped_stop_strings_are_restored():
    stops = ("</tool_call>", "</answer>")
    assert restore_stop('<tool_call>{"name": "f"}', stops) == '<tool_call>{"name": "f"}</tool_call>'
    assert restore_stop("<answer>4", stops) == "<answer>4</answer>"
    assert restore_stop("<answer>4</answer>", stops) == "<answer>4</answer>"
    assert restore_stop("plain", stops) == "plain"


def test_a_request_seed_makes_the_reply_reproducible(server):
    import httpx

    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 1.0}
    replies = [
        httpx.post(f"{server}/chat/completions", json={**body, "seed": s}, timeout=60).json()["choices"][0]["message"][
            "content"
        ]
        for s in (5, 5, 6)
    ]
    assert replies[0] == replies[1] != replies[2]
