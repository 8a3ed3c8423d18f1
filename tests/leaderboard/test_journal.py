"""The results journal is replayed line by line: a well-formed line of the wrong types or ranges is skipped and
counted, the lines after it are recovered, and no non-finite number reaches the database or the board."""

from __future__ import annotations

import copy
import json
import sqlite3
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from agentgym_r1.cli import main
from agentgym_r1.leaderboard.journal import CHECKS
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta, TrainingRecord


def _store_with_one_run(path: Path) -> tuple[dict, dict]:
    """A real store with two episodes; returns the run and an episode as journaled."""
    store = ResultsStore(path)
    meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", "scripted", 0, 4)
    run_id = store.begin_run(meta)
    for i in range(2):
        store.add_episode(meta, run_id, EpisodeRecord(i, i, f"t-{i}", True, 1.0, 2, 0, metrics={"accuracy": 1.0}))
    store.close()
    last = json.loads(Path(f"{path}.jsonl").read_text().splitlines()[-1])
    return last["run"], last["episode"]


def _with(entry: dict, where: str, key: str, value: object) -> str:
    entry = copy.deepcopy(entry)
    entry[where][key] = value
    return json.dumps(entry)


BAD_SHAPES = {
    "idx past int64": ("episode", "idx", 10**30),
    "seed past int64": ("episode", "seed", 10**30),
    "run seed past int64": ("run", "seed", 10**30),
    "negative idx": ("episode", "idx", -1),
    "dict for a number": ("episode", "reward", {"a": 1}),
    "dict for turns": ("episode", "turns", {}),
    "list for the seed": ("run", "seed", [1]),
    "string for success": ("episode", "success", "yes"),
    "huge int for a reward": ("episode", "reward", 10**400),
    "number for a task id": ("episode", "task_id", 7),
    "string metric": ("episode", "metrics", {"accuracy": "1"}),
    "unknown field": ("episode", "colour", "red"),
}


@pytest.mark.parametrize("shape", sorted(BAD_SHAPES))
def test_a_well_formed_line_of_the_wrong_type_is_skipped_and_the_lines_after_it_recovered(tmp_path, shape):
    path = tmp_path / "r.sqlite"
    run, episode = _store_with_one_run(path)
    where, key, value = BAD_SHAPES[shape]
    entry = {"run": run, "episode": {**episode, "idx": 2}}
    good_after = {"run": run, "episode": {**episode, "idx": 3}}
    with open(f"{path}.jsonl", "a") as f:
        f.write(_with(entry, where, key, value) + "\n" + json.dumps(good_after) + "\n")
    path.write_bytes(b"\0" * 10)  # damaged: rebuilt from the journal
    with pytest.warns(RuntimeWarning, match="1 unreadable journal line"):
        store = ResultsStore(path)
    assert store.recovery and "1 unreadable journal line(s) skipped: line " in store.recovery
    assert key in store.recovery  # the reason names the field
    (row,) = store.runs()
    assert [e.idx for e in store.episodes(row["id"])] == [0, 1, 3]


NON_FINITE_SHAPES = {
    "a metric": ("metrics", {"accuracy": "@"}),
    "the metrics": ("metrics", "@"),
    "the reward": ("reward", "@"),
    "the seconds": ("seconds", "@"),
}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("shape", sorted(NON_FINITE_SHAPES))
def test_non_finite_numbers_in_the_journal_are_never_stored_and_show_still_works(tmp_path, capsys, constant, shape):
    path = tmp_path / "r.sqlite"
    run, episode = _store_with_one_run(path)
    key, value = NON_FINITE_SHAPES[shape]
    line = json.dumps({"run": run, "episode": {**episode, "idx": 2, key: value}}).replace('"@"', constant)
    with open(f"{path}.jsonl", "a") as f:
        f.write(line + "\n" + json.dumps({"run": run, "episode": {**episode, "idx": 3}}) + "\n")
    path.unlink()  # deleted: rebuilt from the journal
    with pytest.warns(RuntimeWarning, match="unreadable journal line"):
        store = ResultsStore(path)
    (row,) = store.runs()
    assert [e.idx for e in store.episodes(row["id"])] == [0, 1, 3]
    store.close()
    with sqlite3.connect(path) as db:
        assert "NaN" not in str(db.execute("SELECT metrics, reward FROM episodes").fetchall())
    assert main(["leaderboard", "show", "--results", str(path)]) == 0
    assert "GSM8K" in capsys.readouterr().out


def test_non_finite_metrics_of_a_live_episode_are_left_out_with_a_warning(tmp_path, capsys):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", "scripted", 0, 2)
    run_id = store.begin_run(meta)
    with pytest.warns(RuntimeWarning, match=r"non-finite \['accuracy', 'reward'\]"):
        store.add_episode(
            meta,
            run_id,
            EpisodeRecord(0, 0, "t-0", False, float("inf"), 2, 0, metrics={"accuracy": float("nan"), "turns": 2}),
        )
    (ep,) = store.episodes(run_id)
    assert ep.metrics == {"turns": 2.0} and ep.reward == 0.0
    store.close()
    journal = Path(f"{path}.jsonl").read_text()
    assert "NaN" not in journal and "Infinity" not in journal
    assert main(["leaderboard", "show", "--results", str(path)]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("metrics", ['{"accuracy": NaN}', "NaN", "[1]"])
def test_a_database_written_with_nan_metrics_before_the_fix_still_shows(tmp_path, capsys, metrics):
    path = tmp_path / "r.sqlite"
    _store_with_one_run(path)
    with sqlite3.connect(path) as db:  # what an older version stored from "metrics": NaN (or a NaN metric)
        db.execute("UPDATE episodes SET metrics = ?", (metrics,))
    assert main(["leaderboard", "show", "--results", str(path)]) == 0
    assert "GSM8K" in capsys.readouterr().out


def test_every_journaled_field_has_a_check():
    for cls in (RunMeta, EpisodeRecord, TrainingRecord):
        for f in fields(cls):
            assert str(f.type) in CHECKS, (cls.__name__, f.name, f.type)


def test_a_live_episode_with_numpy_numbers_journals_a_line_that_replays(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", "scripted", 0, 1)
    run_id = store.begin_run(meta)
    store.add_episode(
        meta,
        run_id,
        EpisodeRecord(
            np.int64(0),
            np.int64(0),
            7,
            np.bool_(True),
            np.float32(1.0),
            np.int64(2),
            np.int64(0),
            metrics={"accuracy": np.float64(1.0), "steps": np.int64(3)},
        ),
    )
    store.close()
    path.unlink()
    rebuilt = ResultsStore(path)  # no unreadable line: the writer stored plain values
    assert rebuilt.recovery and "unreadable" not in rebuilt.recovery
    (ep,) = rebuilt.episodes(rebuilt.runs()[0]["id"])
    assert (ep.task_id, ep.success, ep.metrics) == ("7", True, {"accuracy": 1.0, "steps": 3.0})
    rebuilt.close()


def test_a_training_record_replays_and_a_bad_one_is_skipped(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    rec = TrainingRecord(
        "k",
        "AgentR1/GSM8K-v0",
        "synthetic",
        "",
        "done",
        None,
        "hf:a",
        "hf:b",
        40,
        [[0, 0.25, 20], [40, 0.5, 20]],
        {"sft_steps": 850, "lr": 1e-4},
        "/tmp/ckpt",
        123,
    )
    store.save_training(rec)
    store.close()
    with open(f"{path}.jsonl", "a") as f:
        f.write(json.dumps({"training": {**json.loads(json.dumps(rec.__dict__)), "key": "k2", "pid": 10**30}}) + "\n")
    path.unlink()
    with pytest.warns(RuntimeWarning, match="TrainingRecord.pid"):
        rebuilt = ResultsStore(path)
    assert [(r.key, r.curve, r.budget) for r in rebuilt.trainings()] == [("k", rec.curve, rec.budget)]
    rebuilt.close()
