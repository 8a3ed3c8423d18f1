"""Model policies against a real HTTP server on loopback and a tiny Qwen2 model built in the test."""

from __future__ import annotations

import socket

import pytest

from agentgym_r1.error import ConfigError, PolicyError, PolicyTimeout
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.models import chat_messages, make_policy
from agentgym_r1.leaderboard.runner import run_episode
from agentgym_r1.leaderboard.store import ResultsStore
from agentgym_r1.leaderboard.suites import make_env
from tests.leaderboard.chat_server import ChatServer

pytest.importorskip("httpx")


@pytest.fixture
def server():
    s = ChatServer()
    yield s
    s.close()


def test_openai_policy_plays_an_episode_against_a_real_server(server):
    env = make_env("AgentR1/GSM8K-v0", "synthetic")
    policy = make_policy(f"openai:{server.url}#tiny-model", "AgentR1/GSM8K-v0")
    r = run_episode(env, policy, seed=0)
    policy.close()
    assert r.turns == 2 and r.invalid == 0 and r.error is None
    said = [m["content"] for m in env.unwrapped.transcript.messages() if m["role"] == "assistant"]
    assert said[0].endswith("</tool_call>") and said[1] == "<answer>42</answer>"  # closing tags put back
    first, second = server.requests
    assert first["path"] == "/v1/chat/completions" and first["model"] == "tiny-model"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][-1]["content"] == "<tool_response>\n42\n</tool_response>"
    assert {"</tool_call>", "</answer>"} <= set(first["stop"]) and first["temperature"] == 0.0
    assert r.success == (env.unwrapped.task.answer == "42")


def test_chat_messages_turn_tool_results_into_user_turns(server):
    env = make_env("AgentR1/GSM8K-v0", "synthetic")
    env.reset(seed=1)
    env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>')
    roles = [m["role"] for m in chat_messages(env)]
    assert roles == ["system", "user", "assistant", "user"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_fails_its_job_with_a_clear_message_and_the_run_goes_on(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    jobs = [
        Job("AgentR1/GSM8K-v0", "synthetic", f"openai:{url}#m", episodes=3),
        Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=3),
    ]
    down, ok = run_jobs(jobs, tmp_path / "r.sqlite", workers=1)
    assert down.status == "failed" and "cannot reach" in down.message and url in down.message
    assert ok.status == "done" and ok.episodes == 3
    store = ResultsStore(tmp_path / "r.sqlite")
    statuses = {r["policy"]: r["status"] for r in store.runs()}
    assert statuses == {f"openai:{url}#m": "failed", "scripted": "done"}


def test_a_model_that_times_out_ends_episodes_unsolved_then_stops_its_job(tmp_path):
    slow = ChatServer(delay=1.0)
    try:
        policy = make_policy(f"openai:{slow.url}#m", "AgentR1/GSM8K-v0", timeout=0.2)
        with pytest.raises(PolicyTimeout):
            policy.reset(make_env("AgentR1/GSM8K-v0", "synthetic"), "", {})
            policy.env.reset(seed=0)
            policy.act("", {})
        (outcome,) = run_jobs(
            [Job("AgentR1/GSM8K-v0", "synthetic", f"openai:{slow.url}#m", episodes=10, timeout=0.2)],
            tmp_path / "r.sqlite",
            workers=1,
        )
    finally:
        slow.close()
    assert outcome.status == "failed" and "in a row failed" in outcome.message
    store = ResultsStore(tmp_path / "r.sqlite")
    episodes = store.episodes(store.runs()[0]["id"])
    assert len(episodes) == 3 and all("did not answer within" in e.error and not e.success for e in episodes)


def test_bad_model_specs_are_config_errors():
    with pytest.raises(ConfigError, match="openai:http"):
        make_policy("openai:localhost#m")
    with pytest.raises(PolicyError, match="no such model directory"):
        make_policy("hf:/nonexistent/model")
    with pytest.raises(ConfigError, match="unknown option"):
        make_policy("hf:/nonexistent/model?temperature=2")


def _tiny_qwen2(path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer

    corpus = ["<tool_call> calculator expression answer 1 2 3 + * </tool_call> <answer> </answer> has how many"] * 20
    make_model(train_tokenizer(corpus, path, vocab_size=300), path, hidden=16, layers=1, heads=2)


def test_hf_policy_runs_a_tiny_local_qwen2_through_the_runner(tmp_path):
    _tiny_qwen2(tmp_path / "tiny")
    (outcome,) = run_jobs(
        [Job("AgentR1/GSM8K-v0", "synthetic", f"hf:{tmp_path / 'tiny'}?max_new_tokens=12", episodes=1)],
        tmp_path / "r.sqlite",
    )
    assert outcome.status == "done", outcome.message
    store = ResultsStore(tmp_path / "r.sqlite")
    (run,) = store.runs()
    (ep,) = store.episodes(run["id"])
    assert run["policy_kind"] == "model"
    assert ep.turns == 6 and ep.invalid == 6 and not ep.success  # an untrained model: six invalid turns
    slow = make_policy(f"hf:{tmp_path / 'tiny'}?max_new_tokens=12", "AgentR1/GSM8K-v0", timeout=1e-4)
    r = run_episode(make_env("AgentR1/GSM8K-v0", "synthetic"), slow, seed=0)
    assert r.turns == 0 and not r.success and "did not finish a turn within" in r.error
