"""The board's statistics, rows and the Agent-R1 reported rows."""

from __future__ import annotations

import math

import pytest

from agentgym_r1.leaderboard.board import REFERENCE, board, mean_ci, wilson
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta


def test_wilson_interval_matches_the_textbook_values():
    s = wilson(8, 10)  # Wilson 95% for 8/10: [0.4902, 0.9433]
    assert s.value == 0.8
    assert s.low == pytest.approx(0.4902, abs=1e-4) and s.high == pytest.approx(0.9433, abs=1e-4)
    zero = wilson(0, 20)
    assert zero.low == 0.0 and zero.high == pytest.approx(0.1611, abs=1e-4)
    assert math.isnan(wilson(0, 0).value)


def test_mean_interval_is_students_t_with_the_sample_deviation():
    s = mean_ci([1.0, 2.0, 3.0, 4.0])
    assert s.value == 2.5
    assert s.half == pytest.approx(3.182446 * math.sqrt(5 / 3) / 2, rel=1e-6)  # t(0.975, 3 dof) = 3.1824


def _store(tmp_path, env_id, policy, kind, episodes):
    store = ResultsStore(tmp_path / "r.sqlite")
    meta = RunMeta(env_id, "synthetic", policy, 0, len(episodes), policy_kind=kind, status="done")
    run_id = store.begin_run(meta)
    for ep in episodes:
        store.add_episode(meta, run_id, ep)
    return store


def test_hotpotqa_rows_have_em_and_f1_with_intervals_and_reported_rows(tmp_path):
    eps = [
        EpisodeRecord(i, i, f"t{i}", i % 2 == 0, 0.0, 2, i % 3 == 0, metrics={"em": float(i % 2 == 0), "f1": f})
        for i, f in enumerate([1.0, 0.5, 1.0, 0.25])
    ]
    store = _store(tmp_path, "AgentR1/HotpotQA-v0", "rag", "baseline", eps)
    (rows,) = board(store).values()
    rag = rows[0]
    assert rag.metrics["em"].value == 0.5 and rag.metrics["f1"].value == pytest.approx(0.6875)
    assert rag.metrics["f1"].low < 0.6875 < rag.metrics["f1"].high
    assert rag.invalid.value == pytest.approx(2 / 8) and rag.turns.value == 2.0
    reported = [r for r in rows if r.reported]
    assert [r.policy for r in reported] == [f"Qwen3-4B {m}" for m in ("ReAct", "GRPO", "PPO", "REINFORCE", "RLOO")]
    assert reported[1].metrics["em"].value == pytest.approx(0.594) and reported[1].status == "reported, not run"
    assert math.isnan(reported[1].metrics["em"].low)  # no interval is invented for a reported figure


def test_reported_table_is_the_papers():
    assert REFERENCE["GSM8K"]["GRPO"] == {"accuracy": 83.3}
    assert REFERENCE["WebShop"]["PPO"] == {"score": 70.18, "success": 46.0}
    assert REFERENCE["ALFWorld"]["ReAct"] == {"success": 7.14}


def test_oracles_sort_after_honest_policies(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    for policy, kind, wins in (("oracle", "oracle", 4), ("scripted", "baseline", 3), ("random", "random", 0)):
        meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", policy, 0, 4, policy_kind=kind)
        run_id = store.begin_run(meta)
        for i in range(4):
            store.add_episode(
                meta, run_id, EpisodeRecord(i, i, None, i < wins, 0.0, 1, 0, metrics={"accuracy": float(i < wins)})
            )
    rows = board(store, references=False)["AgentR1/GSM8K-v0"]
    assert [r.policy for r in rows] == ["scripted", "random", "oracle"]
    assert rows[0].metrics["accuracy"].value == 0.75
