"""The main job's seed runs read on a prefix of their held-out episodes (``--table --first N``): the rows and the
paired test on episodes 0..N-1 only, from each run's results store, as a run scored on N problems would have had."""

from __future__ import annotations

import json

import main_job_seeds
import pytest

from agentgym_r1.leaderboard.board import mcnemar, wilson
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta, TrainingRecord

BEFORE, AFTER = "hf:/ckpt/sft?max_new_tokens=40", "hf:/ckpt/grpo?max_new_tokens=40"


def _run(store, policy, outcomes):
    meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", policy, 0, len(outcomes), policy_kind="model", status="done")
    run_id = store.begin_run(meta)
    for i, ok in enumerate(outcomes):
        store.add_episode(meta, run_id, EpisodeRecord(i, i, None, ok, float(ok), 1, 0, metrics={"accuracy": float(ok)}))
    store.finish_run(meta, "done")


def test_the_table_on_the_first_episodes_reads_each_runs_store(tmp_path):
    before = [False] * 8 + [True] * 4
    after = [True] * 6 + [False] * 2 + [True, True, False, False]  # first 8: 6 gained; last 4: 2 lost
    store = ResultsStore(tmp_path / "seed0-avx2" / "results.sqlite")
    store.save_training(
        TrainingRecord("k", "AgentR1/GSM8K-v0", "synthetic", "", "done", None, BEFORE, AFTER, 2, [], {"grpo_steps": 2})
    )
    _run(store, BEFORE, before)
    _run(store, AFTER, after)
    store.close()
    whole = {"value": 4 / 12, "low": 0.0, "high": 1.0}
    run = {"seed": 0, "kernels": "avx2", "torch_capability": "AVX2", "before": whole, "after": whole, "gained": 0,
           "lost": 0, "mcnemar_p": 1.0, "separated": False, "budget": {"sft_steps": 1, "grpo_steps": 2},
           "wall_s": 1.0, "load_after": [0.0], "commit": "a" * 40, "dirty": False}  # fmt: skip
    (tmp_path / "seed0-avx2.json").write_text(json.dumps(run), encoding="utf-8")

    got = main_job_seeds.first_rows(tmp_path / "seed0-avx2", 8)
    assert (got["gained"], got["lost"]) == (6, 0) and got["mcnemar_p"] == pytest.approx(mcnemar(6, 0))
    assert got["before"]["value"] == 0 and got["after"]["value"] == 6 / 8
    assert got["after"]["low"] == pytest.approx(wilson(6, 8).low) and got["separated"]
    assert (main_job_seeds.first_rows(tmp_path / "seed0-avx2", 12)["lost"]) == 2
    row = main_job_seeds.table(tmp_path, first=8).splitlines()[-1]
    assert "| 0.0 [" in row and "| 75.0 [" in row and "| 6 / 0 |" in row
    assert "| 33.3 [0.0, 100.0] |" in main_job_seeds.table(tmp_path).splitlines()[-1]  # without --first: the JSON's
    with pytest.raises(SystemExit, match="12 and 12 episodes stored, fewer than --first 16"):
        main_job_seeds.first_rows(tmp_path / "seed0-avx2", 16)
