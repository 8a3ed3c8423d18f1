"""Jobs: bad input stops only the job it concerns; envs run in parallel processes into one store."""

from __future__ import annotations

import io
import re

from agentgym_r1.leaderboard.jobs import Job, Progress, run_jobs
from agentgym_r1.leaderboard.store import ResultsStore
from agentgym_r1.leaderboard.suites import SUITES


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_unregistered_env_and_unknown_policy_are_recorded_and_the_rest_runs(tmp_path):
    stream = Terminal()
    jobs = [
        Job("AgentR1/NotHere-v0", "synthetic", "random", episodes=2),
        Job("AgentR1/GSM8K-v0", "synthetic", "no-such-policy", episodes=2),
        Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=4),
    ]
    skipped, unknown, ok = run_jobs(jobs, tmp_path / "r.sqlite", workers=1, progress=Progress(stream))
    assert skipped.status == "skipped" and "not registered in this checkout" in skipped.message
    assert unknown.status == "failed" and "unknown policy 'no-such-policy'" in unknown.message
    assert "'scripted'" in unknown.message  # it lists the choices
    assert ok.status == "done" and ok.successes == 4
    text = stream.getvalue()  # tqdm's bar: done/total, the live success rate and the ETA
    assert re.search(r"AgentR1/GSM8K-v0 scripted: 100%.*\| 4/4 \[[0-9:]+<00:00, .*success=1\.00\]", text), text
    assert "SKIPPED" in text


def test_progress_is_quiet_when_not_a_terminal_but_says_why_a_job_stopped(tmp_path):
    stream = io.StringIO()
    jobs = [
        Job("AgentR1/NotHere-v0", "synthetic", "random", episodes=2),
        Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=3),
    ]
    run_jobs(jobs, tmp_path / "r.sqlite", workers=1, progress=Progress(stream))
    assert "SKIPPED" in stream.getvalue() and "scripted" not in stream.getvalue()
    runs = {(r["env_id"], r["policy"]): r for r in ResultsStore(tmp_path / "r.sqlite").runs()}
    assert runs[("AgentR1/NotHere-v0", "random")]["status"] == "skipped"


def test_envs_run_in_parallel_processes_into_one_store(tmp_path):
    jobs = [
        Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=5),
        Job("AgentR1/GSM8K-v0", "synthetic", "random", episodes=5),
        Job("AgentR1/ToolEnv-v0", "lookup", "scripted", episodes=5),
    ]
    outcomes = run_jobs(jobs, tmp_path / "r.sqlite", workers=2)
    assert [o.status for o in outcomes] == ["done"] * 3, [o.message for o in outcomes]
    store = ResultsStore(tmp_path / "r.sqlite")
    assert sorted(len(store.episodes(r["id"])) for r in store.runs()) == [5, 5, 5]
    again = run_jobs(jobs, tmp_path / "r.sqlite", workers=2)  # all stored: nothing is replayed
    assert [o.episodes for o in again] == [5, 5, 5]
    assert sum(len(store.episodes(r["id"])) for r in store.runs()) == 15


def test_suites_name_all_five_envs_with_offline_sources():
    five = {
        ("AgentR1/GSM8K-v0", "synthetic"),
        ("AgentR1/ToolEnv-v0", "lookup"),
        ("AgentR1/HotpotQA-v0", "synthetic"),
        ("AgentR1/ALFWorld-v1", "generated"),
        ("AgentR1/WebShop-v0", "generated"),
    }
    # the full suite also plays GSM8K with the sandboxed python tool; the quick suite (the main job) stays the five
    extra = {"quick": set(), "full": {("AgentR1/PythonMath-v0", "synthetic")}}
    for name, entries in SUITES.items():
        assert {(e.env_id, e.source) for e in entries} == five | extra[name]
        assert all("random" in e.policies and "oracle" in e.policies for e in entries)


# -- workers die with the main process; a resumed run equals an uninterrupted one --------------------------------------
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_DRIVER = """
import sys, time
from agentgym_r1.leaderboard.jobs import Job, run_jobs
envs = [("AgentR1/WebShop-v0", "generated", 3), ("AgentR1/WebShop-v0", "generated", 4)]
pace = None
if sys.argv[3] != "1":
    envs = [("AgentR1/GSM8K-v0", "synthetic", 3), ("AgentR1/ToolEnv-v0", "lookup", 3)]
else:  # in-process: 50 ms after each stored episode, so the test's 10 ms poll kills the run before it ends
    pace = lambda *_: time.sleep(0.05)
jobs = [Job(env, src, "random", seed=seed, episodes=int(sys.argv[2])) for env, src, seed in envs]
run_jobs(jobs, sys.argv[1], workers=int(sys.argv[3]), progress=pace)
"""


def _driver(store: Path, episodes: int, workers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(store), str(episodes), str(workers)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )


def _alive_children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_the_main_process(tmp_path, sig):
    main = _driver(tmp_path / "r.sqlite", 100_000, 2)
    deadline, workers = time.monotonic() + 60, []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [p for p in _alive_children(main.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        time.sleep(0.2)
    assert len(workers) == 2, "the workers did not start"
    time.sleep(1.0)
    os.kill(main.pid, sig)  # the main process only
    main.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(_alive, workers)):
        time.sleep(0.2)
    left = [p for p in workers if _alive(p)]
    for p in left:  # do not leave them behind if the test fails
        os.kill(p, signal.SIGKILL)
    assert not left, f"workers {left} outlived the main process by 10 s"


def _episodes(store_path: Path) -> dict:
    store = ResultsStore(store_path)
    try:
        return {
            (r["env_id"], r["seed"], e.idx): (
                e.seed,
                e.task_id,
                e.success,
                e.reward,
                e.turns,
                e.invalid,
                e.truncated,
                json.dumps(e.metrics, sort_keys=True),
                e.error,
            )
            for r in store.runs()
            for e in store.episodes(r["id"])
        }
    finally:
        store.close()


def _webshop_jobs(episodes: int) -> list[Job]:  # a random policy whose clicks change the episodes
    return [Job("AgentR1/WebShop-v0", "generated", "random", seed=seed, episodes=episodes) for seed in (3, 4)]


def test_a_run_killed_at_a_random_point_and_resumed_equals_a_clean_run(tmp_path):
    episodes = 12
    clean = tmp_path / "clean.sqlite"
    run_jobs(_webshop_jobs(episodes), clean, workers=1)
    killed = tmp_path / "killed.sqlite"
    stop_after = int(np.random.default_rng().integers(1, 2 * episodes - 1))  # a random point, inside the run
    main = _driver(killed, episodes, 1)
    journal = Path(f"{killed}.jsonl")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and main.poll() is None:
        if journal.exists() and journal.read_text().count('"episode"') >= stop_after:
            break
        time.sleep(0.01)
    main.kill()
    main.wait()
    partial = len(_episodes(killed))
    run_jobs(_webshop_jobs(episodes), killed, workers=1)
    resumed, expected = _episodes(killed), _episodes(clean)
    assert len(expected) == 2 * episodes and 0 < partial < 2 * episodes, (stop_after, partial)
    assert resumed == expected, f"killed after {partial} episodes (aimed at {stop_after})"


def test_an_error_a_worker_lets_out_is_reported_as_itself_not_as_a_dead_worker(tmp_path):
    """A worker that raised (here: a results path it cannot open) is alive: its jobs fail with the error's own
    message; 'worker process died' is kept for a pool that lost a process."""
    jobs = [
        Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=1),
        Job("AgentR1/ToolEnv-v0", "lookup", "scripted", episodes=1),
    ]
    outcomes = run_jobs(jobs, tmp_path, workers=2)  # a directory: no database can be opened there
    assert [o.status for o in outcomes] == ["failed", "failed"]
    for o in outcomes:
        assert o.message.startswith("ResultsFileError: cannot open") and "died" not in o.message
