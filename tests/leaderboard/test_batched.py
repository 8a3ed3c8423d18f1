"""Model policies in batches: openai: episodes in flight against a real loopback server, bad endpoints failing only
their episodes, K samples per task with pass@k, and vllm: refused with the extra to install when vLLM is absent."""

from __future__ import annotations

import importlib.util
import math

import pytest

from agentgym_r1.error import DependencyNotInstalled
from agentgym_r1.leaderboard.batched import check_spec
from agentgym_r1.leaderboard.board import board, pass_at_k
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.render import terminal
from agentgym_r1.leaderboard.store import ResultsStore
from tests.leaderboard.chat_server import ChatServer

pytest.importorskip("openai")
GSM8K = "AgentR1/GSM8K-v0"


def test_openai_policy_keeps_concurrency_requests_in_flight(tmp_path):
    server = ChatServer(delay=0.5)
    try:
        (outcome,) = run_jobs(
            [Job(GSM8K, "synthetic", f"openai:{server.url}#m", episodes=8, concurrency=4)],
            tmp_path / "r.sqlite",
            workers=1,
        )
    finally:
        server.close()
    assert outcome.status == "done" and outcome.episodes == 8, outcome.message
    assert server.max_in_flight == 4  # never one at a time, never more than asked
    assert len(server.requests) == 16  # two turns per episode
    store = ResultsStore(tmp_path / "r.sqlite")
    episodes = store.episodes(store.runs()[0]["id"])
    assert sorted(e.idx for e in episodes) == list(range(8)) and all(e.turns == 2 and not e.error for e in episodes)


def test_an_endpoint_answering_garbage_fails_its_episodes_with_the_reason_and_the_board_counts_them(tmp_path):
    server = ChatServer(garbage="<html>502 bad gateway</html>")
    try:
        bad, ok = run_jobs(
            [
                Job(GSM8K, "synthetic", f"openai:{server.url}#m", episodes=10, concurrency=2),
                Job(GSM8K, "synthetic", "scripted", episodes=3),
            ],
            tmp_path / "r.sqlite",
            workers=1,
        )
    finally:
        server.close()
    assert ok.status == "done" and ok.successes == 3  # the rest of the run goes on
    assert bad.status == "failed" and "in a row failed" in bad.message
    store = ResultsStore(tmp_path / "r.sqlite")
    run = next(r for r in store.runs() if r["policy"].startswith("openai:"))
    episodes = store.episodes(run["id"])
    assert 3 <= len(episodes) < 10  # the job stopped after three failed episodes in a row
    assert all(e.error and server.url in e.error and not e.success for e in episodes)
    (row,) = [r for r in board(store, references=False)[GSM8K] if r.policy.startswith("openai:")]
    assert row.errors == len(episodes) and f"{len(episodes)} failed" in terminal({GSM8K: [row]})


def test_samples_play_each_task_k_times_and_the_board_shows_pass_at_k(tmp_path):
    (outcome,) = run_jobs(
        [Job(GSM8K, "synthetic", "random", seed=5, episodes=3, samples=4)], tmp_path / "r.sqlite", workers=1
    )
    assert outcome.status == "done" and outcome.episodes == 12
    store = ResultsStore(tmp_path / "r.sqlite")
    (run,) = store.runs()
    assert run["episodes"] == 12 and '{"samples":4}' in run["key"]
    assert sorted(e.seed for e in store.episodes(run["id"])) == [5] * 4 + [6] * 4 + [7] * 4
    (row, *_) = board(store)[GSM8K]
    k, one, at_k = row.passk
    assert k == 4 and one.value == row.metrics["accuracy"].value and at_k.value >= one.value
    assert "pass@4 %" in terminal({GSM8K: [row]})


def test_pass_at_k_is_the_unbiased_estimator():
    for n, c, k in [(5, 2, 3), (10, 3, 1), (10, 0, 5), (7, 7, 2), (20, 4, 10)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_policy_without_vllm_names_the_extra_before_any_work(tmp_path):
    with pytest.raises(DependencyNotInstalled, match="vllm"):
        check_spec(f"vllm:{tmp_path}", GSM8K)
    (outcome,) = run_jobs([Job(GSM8K, "synthetic", f"vllm:{tmp_path}", episodes=2)], tmp_path / "r.sqlite")
    assert outcome.status == "failed" and "pip install" in outcome.message


def test_hf_policy_plays_its_episodes_in_batches_on_the_rollout_engine(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer

    path = tmp_path / "tiny"
    corpus = ["<tool_call> calculator expression answer 1 2 3 + * </tool_call> <answer> </answer> has how many"] * 20
    make_model(train_tokenizer(corpus, path, vocab_size=300), path, hidden=16, layers=1, heads=2)
    sizes: list[int] = []
    generate = HFBackend.generate

    def spy(self, contexts, budgets, params):
        sizes.append(len(contexts))
        return generate(self, contexts, budgets, params)

    monkeypatch.setattr(HFBackend, "generate", spy)
    (outcome,) = run_jobs(
        [Job(GSM8K, "synthetic", f"hf:{path}?max_new_tokens=8", episodes=5, concurrency=3)], tmp_path / "r.sqlite"
    )
    assert outcome.status == "done" and outcome.episodes == 5, outcome.message
    assert max(sizes) == 3 and sizes[0] == 3 and 2 in sizes  # a batch of 3, then the last 2
    store = ResultsStore(tmp_path / "r.sqlite")
    episodes = store.episodes(store.runs()[0]["id"])
    assert [e.seed for e in episodes] == [0, 1, 2, 3, 4] and all(e.turns == 6 and e.invalid == 6 for e in episodes)
