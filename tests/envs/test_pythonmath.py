"""``AgentR1/PythonMath-v0``: GSM8K with the sandboxed python tool; hostile programs are error observations and the
episode goes on; the scripted and oracle baselines on every difficulty and source."""

from __future__ import annotations

import json
import re

import pytest

from agentgym_r1.leaderboard.board import metric_columns
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.suites import PYTHON_MATH, SUITES
from tests.conftest import make_env
from tests.core.test_sandbox import HOSTILE

ENV_ID = "AgentR1/PythonMath-v0"


def call(code: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'python', 'arguments': {'code': code}})}</tool_call>"


def test_hostile_programs_are_error_observations_and_the_episode_goes_on():
    limits = {"cpu_s": 2, "wall_s": 20.0, "memory_bytes": 256 * 2**20, "processes": 8}
    env = make_env(ENV_ID, limits=limits).unwrapped  # no turn limit: the corpus is longer than 6 turns
    env.reset(seed=0)
    task = env.task
    for name, program, says in HOSTILE[:4] + HOSTILE[5:8] + HOSTILE[10:12]:
        obs, reward, terminated, truncated, info = env.step(call(program))
        assert re.search(says, obs) and not terminated and not truncated, (name, obs[-300:])
        assert "<tool_response>" in obs
    obs, reward, terminated, truncated, info = env.step(f"<answer>{task.answer}</answer>")
    assert terminated and info["metrics"]["accuracy"] == 1.0
    env.close()


@pytest.mark.parametrize("entry", PYTHON_MATH, ids=lambda e: dict(e.env_kwargs).get("difficulty", "easy"))
def test_scripted_and_oracle_baselines_at_every_level(entry, tmp_path):
    make_env(ENV_ID).close()  # skips, with the reason, where bwrap cannot run
    jobs = [
        Job(
            entry.env_id,
            entry.source,
            p,
            episodes=3,
            env_kwargs=json.dumps(dict(entry.env_kwargs)) if entry.env_kwargs else "",
        )
        for p in entry.policies
    ]
    outcomes = {o.job.policy: o for o in run_jobs(jobs, tmp_path / "r.sqlite", workers=1)}
    assert all(o.status == "done" for o in outcomes.values()), {p: o.message for p, o in outcomes.items()}
    assert outcomes["oracle"].successes == 3
    if not entry.env_kwargs:  # the reader knows every easy sentence
        assert outcomes["scripted"].successes == 3
    assert entry in SUITES["full"] and entry not in SUITES["quick"]
    assert metric_columns(entry.env_id) == (("accuracy", "accuracy"),)  # the board shows GSM8K's column


def test_official_jsonl_source(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(
        json.dumps(
            {
                "question": "Tom has 3 boxes of 12 eggs and eats 5. How many are left?",
                "answer": "3 boxes hold <<3*12=36>>36 eggs. 36-5=<<36-5=31>>31\n#### 31",
            }
        )
        + "\n"
    )
    env = make_env(ENV_ID, source=str(path))
    obs, _ = env.reset(seed=0)
    assert "python" in obs and "Tom has 3 boxes" in obs
    obs, *_ = env.step(call("print(3 * 12 - 5)"))
    assert "31" in obs
    _, reward, terminated, _, info = env.step("#### 31")
    assert terminated and info["metrics"]["accuracy"] == 1.0
    env.close()
