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
    jobs = [Job("AgentR1/NotHere-v0", "synthetic", "random", episodes=2),
            Job("AgentR1/GSM8K-v0", "synthetic", "no-such-policy", episodes=2),
            Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=4)]
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
    jobs = [Job("AgentR1/NotHere-v0", "synthetic", "random", episodes=2),
            Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=3)]
    run_jobs(jobs, tmp_path / "r.sqlite", workers=1, progress=Progress(stream))
    assert "SKIPPED" in stream.getvalue() and "scripted" not in stream.getvalue()
    runs = {(r["env_id"], r["policy"]): r for r in ResultsStore(tmp_path / "r.sqlite").runs()}
    assert runs[("AgentR1/NotHere-v0", "random")]["status"] == "skipped"


def test_envs_run_in_parallel_processes_into_one_store(tmp_path):
    jobs = [Job("AgentR1/GSM8K-v0", "synthetic", "scripted", episodes=5),
            Job("AgentR1/GSM8K-v0", "synthetic", "random", episodes=5),
            Job("AgentR1/ToolEnv-v0", "lookup", "scripted", episodes=5)]
    outcomes = run_jobs(jobs, tmp_path / "r.sqlite", workers=2)
    assert [o.status for o in outcomes] == ["done"] * 3, [o.message for o in outcomes]
    store = ResultsStore(tmp_path / "r.sqlite")
    assert sorted(len(store.episodes(r["id"])) for r in store.runs()) == [5, 5, 5]
    again = run_jobs(jobs, tmp_path / "r.sqlite", workers=2)  # all stored: nothing is replayed
    assert [o.episodes for o in again] == [5, 5, 5]
    assert sum(len(store.episodes(r["id"])) for r in store.runs()) == 15


def test_suites_name_all_five_envs_with_offline_sources():
    for entries in SUITES.values():
        assert {(e.env_id, e.source) for e in entries} == {
            ("AgentR1/GSM8K-v0", "synthetic"), ("AgentR1/ToolEnv-v0", "lookup"),
            ("AgentR1/HotpotQA-v0", "synthetic"), ("AgentR1/ALFWorld-v0", "generated"),
            ("AgentR1/WebShop-v0", "generated")}
        assert all("random" in e.policies and "oracle" in e.policies for e in entries)
