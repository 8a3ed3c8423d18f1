"""The results store: every episode stored at once, a killed run resumes, a damaged file is rebuilt from the journal."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgym_r1.error import ConfigError, ResultsFileError
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta

ROOT = Path(__file__).resolve().parents[2]


def _count(path: Path) -> int:
    with sqlite3.connect(path, timeout=30) as db:
        try:
            return db.execute("SELECT count(*) FROM episodes").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def test_a_killed_run_keeps_its_episodes_and_resumes_where_it_stopped(tmp_path):
    db = tmp_path / "r.sqlite"
    cmd = [
        sys.executable,
        "-m",
        "agentgym_r1.cli",
        "eval",
        "--policy",
        "scripted",
        "--env",
        "AgentR1/GSM8K-v0",
        "--source",
        "synthetic",
        "--episodes",
        "100000",
        "--results",
        str(db),
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    deadline = time.monotonic() + 60
    while (not db.exists() or _count(db) < 5) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = ResultsStore(db)
    assert store.recovery is None
    (run,) = store.runs()
    before = {e.idx: e.finished_at for e in store.episodes(run["id"])}
    assert len(before) >= 5 and run["status"] == "running"
    assert sorted(before) == list(range(len(before)))
    store.close()
    target = len(before) + 3
    (outcome,) = run_jobs([Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=target)], db)
    assert outcome.status == "done" and outcome.episodes == target
    store = ResultsStore(db)
    (run,) = store.runs()
    after = {e.idx: e.finished_at for e in store.episodes(run["id"])}
    assert sorted(after) == list(range(target)) and run["status"] == "done"
    assert all(after[i] == t for i, t in before.items())  # nothing finished was replayed or lost


def _filled(tmp_path: Path) -> Path:
    db = tmp_path / "r.sqlite"
    run_jobs(
        [
            Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=4),
            Job("AgentR1/ToolEnv-v0", "lookup", "scripted", episodes=3),
        ],
        db,
        workers=1,
    )
    return db


def test_a_file_that_is_not_a_database_is_kept_aside_and_rebuilt_from_the_journal(tmp_path):
    db = _filled(tmp_path)
    db.write_bytes(b"garbage, not SQLite" * 100)
    store = ResultsStore(db)
    assert store.recovery is not None and "rebuilt 7 episode(s) of 2 run(s)" in store.recovery
    assert sorted(r["policy"] for r in store.runs()) == ["scripted", "scripted"]
    assert sum(len(store.episodes(r["id"])) for r in store.runs()) == 7
    backups = list(tmp_path.glob("r.sqlite.corrupt-*"))
    assert backups and backups[0].read_bytes().startswith(b"garbage")


def test_damaged_pages_are_detected_and_the_run_goes_on(tmp_path):
    db = _filled(tmp_path)
    data = bytearray(db.read_bytes())
    page = 4096
    for offset in range(page, len(data), page):  # wreck every page but the header's
        data[offset : offset + 64] = b"\xff" * 64
    db.write_bytes(bytes(data))
    (outcome,) = run_jobs([Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=6)], db, workers=1)
    assert outcome.status == "done" and outcome.episodes == 6
    assert list(tmp_path.glob("r.sqlite.corrupt-*"))  # the damaged file is kept for inspection
    store = ResultsStore(db)
    gsm = next(r for r in store.runs() if r["env_id"] == "AgentR1/GSM8K-v0")
    assert len(store.episodes(gsm["id"])) == 6 and len(store.runs()) == 2


def test_a_torn_journal_line_is_skipped(tmp_path):
    db = _filled(tmp_path)
    with open(f"{db}.jsonl", "a") as f:
        f.write('{"run": {"env_id": "AgentR1/GSM8K-v0", "sou')  # killed mid-write
    db.write_bytes(b"\0" * 10)
    store = ResultsStore(db)
    assert "1 unreadable journal line(s) skipped" in store.recovery
    assert sum(len(store.episodes(r["id"])) for r in store.runs()) == 7


def test_run_metadata_is_recorded(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", "scripted", 3, 10, package_version="0.1.0", git_commit="abc")
    run_id = store.begin_run(meta)
    store.add_episode(meta, run_id, EpisodeRecord(0, 3, "t-0", True, 1.0, 2, 0, metrics={"accuracy": 1.0}))
    (run,) = store.runs()
    assert (run["env_id"], run["env_version"], run["source"], run["policy"], run["seed"]) == (
        "AgentR1/GSM8K-v0",
        "v0",
        "synthetic",
        "scripted",
        3,
    )
    assert run["package_version"] == "0.1.0" and run["git_commit"] == "abc" and run["started_at"]
    (ep,) = store.episodes(run_id)
    assert ep.metrics == {"accuracy": 1.0} and ep.finished_at


def test_a_file_locked_by_a_parallel_job_is_waited_for_not_recovered(tmp_path, monkeypatch):
    """'database is locked' while opening (a parallel job creating the schema) is not corruption: the store waits;
    moving the file aside would lose the other job's writes ('no such table: episodes' there)."""
    path = tmp_path / "r.sqlite"
    ResultsStore(path).close()
    real_open, calls = ResultsStore._open, []

    def locked_twice(self):
        calls.append(1)
        if len(calls) <= 2:
            raise sqlite3.OperationalError("database is locked")
        return real_open(self)

    monkeypatch.setattr(ResultsStore, "_open", locked_twice)
    store = ResultsStore(path)
    assert len(calls) == 3 and store.recovery is None
    assert list(tmp_path.glob("r.sqlite.corrupt-*")) == []
    store.close()


def test_an_emptied_or_deleted_results_file_is_rebuilt_from_the_journal(tmp_path):
    path = tmp_path / "r.sqlite"
    jobs = [Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=4)]
    run_jobs(jobs, path, workers=1)
    journal_lines = Path(f"{path}.jsonl").read_text().count("\n")
    for damage in ("truncate", "delete"):
        for side in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            side.unlink(missing_ok=True)
        if damage == "truncate":
            path.write_bytes(b"")
        else:
            path.unlink()
        store = ResultsStore(path)
        assert store.recovery and "rebuilt 4 episode(s) of 1 run(s)" in store.recovery
        assert [len(store.episodes(r["id"])) for r in store.runs()] == [4]
        store.close()
        again = run_jobs(jobs, path, workers=1)  # nothing left to play: the journal gains only the run's status lines
        assert again[0].episodes == 4
        assert Path(f"{path}.jsonl").read_text().count('"episode"') == 4
    assert Path(f"{path}.jsonl").read_text().count("\n") < journal_lines + 6


HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")  # every other writer gets "database is locked" past its busy timeout
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
print("released", flush=True)
"""


@contextlib.contextmanager
def _holding_lock(path: Path, seconds: float) -> Iterator[subprocess.Popen]:
    """A second process that holds ``path`` locked for ``seconds`` (entered once it holds the lock; killed at exit)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with sqlite3.connect(path, timeout=0) as probe, pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("CREATE TABLE probe (a)")  # it does hold the lock
        yield holder
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()


def test_a_write_waits_for_a_database_another_process_holds_past_the_busy_timeout(tmp_path):
    """The store's retry used to be a @contextmanager yielding in a loop: the first retry raised 'generator didn't
    stop after throw()'. Now each write waits (busy timeout, then retries) and lands once."""
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path, busy_timeout=0.2, retry_for=60)
    meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", "scripted", 0, 3)
    run_id = store.begin_run(meta)
    with _holding_lock(path, 2.0) as holder:  # ten busy timeouts
        for i in range(3):
            store.add_episode(meta, run_id, EpisodeRecord(i, i, f"t-{i}", i % 2 == 0, 1.0, 2, 0))
        meta.status = "done"
        store.begin_run(meta)
        assert holder.stdout.readline().strip() == "released"  # the writes landed after the holder let go
    assert [(e.idx, e.task_id) for e in store.episodes(run_id)] == [(0, "t-0"), (1, "t-1"), (2, "t-2")]
    assert [r["status"] for r in store.runs()] == ["done"]
    store.close()
    assert Path(f"{path}.jsonl").read_text().count('"episode"') == 3  # journaled once each
    path.unlink()
    rebuilt = ResultsStore(path)
    assert [e.idx for e in rebuilt.episodes(rebuilt.runs()[0]["id"])] == [0, 1, 2]
    rebuilt.close()


def test_a_database_locked_past_the_retry_window_is_a_named_error(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path, busy_timeout=0.1, retry_for=0.5)
    meta = RunMeta("AgentR1/GSM8K-v0", "synthetic", "scripted", 0, 1)
    run_id = store.begin_run(meta)
    with _holding_lock(path, 60.0), pytest.raises(ResultsFileError, match=r"still locked after 0\.5 s"):
        store.add_episode(meta, run_id, EpisodeRecord(0, 0, "t-0", True, 1.0, 2, 0))
    assert store.episodes(run_id) == []
    assert '"episode"' not in Path(f"{path}.jsonl").read_text()  # not journaled either: a rerun plays it
    store.close()


def test_opening_a_database_another_process_holds_waits_then_opens_or_says_why(tmp_path):
    """Before WAL mode is on, an exclusive lock keeps readers out too: opening waits for it (a real second process),
    and past ``retry_for`` it is a named error, never a 'recovery' that moves the other process's file aside."""
    path = tmp_path / "r.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE other (a)")
    with _holding_lock(path, 60.0), pytest.raises(ResultsFileError, match="cannot open"):
        ResultsStore(path, busy_timeout=0.1, retry_for=0.5)
    with _holding_lock(path, 1.5) as holder:
        store = ResultsStore(path, busy_timeout=0.1, retry_for=60)
        assert holder.stdout.readline().strip() == "released"
    assert store.recovery is None and store.runs() == [] and not list(tmp_path.glob("r.sqlite.corrupt-*"))
    store.close()


@pytest.mark.parametrize("field", ["busy_timeout", "retry_for"])
@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "10"])
def test_bad_lock_timeouts_are_refused(tmp_path, field, value):
    with pytest.raises(ConfigError, match=field):
        ResultsStore(tmp_path / "r.sqlite", **{field: value})
