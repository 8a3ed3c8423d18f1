"""``--env-kwargs``: env options recorded with the results, shown on the board; the full suite runs every level."""

from __future__ import annotations

import csv
import io
import sqlite3

import pytest

from agentgym_r1.cli import main
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.store import ResultsStore, RunMeta
from agentgym_r1.leaderboard.suites import SUITES, parse_env_kwargs


def test_eval_records_the_options_and_prints_them(tmp_path, capsys):
    db = tmp_path / "e.sqlite"
    argv = [
        "eval",
        "--policy",
        "scripted",
        "--env",
        "AgentR1/GSM8K-v0",
        "--source",
        "synthetic",
        "--episodes",
        "20",
        "--results",
        str(db),
    ]
    assert main([*argv, "--env-kwargs", '{"difficulty": "hard"}']) == 0
    hard = capsys.readouterr().out
    assert "source=synthetic difficulty=hard episodes=20" in hard and "env options" in hard
    assert main(argv) == 0  # the same command without options is another run in the same store
    easy = capsys.readouterr().out
    assert "source=synthetic episodes=20 success 1.000" in easy
    store = ResultsStore(db)
    runs = {r["env_kwargs"]: r for r in store.runs()}
    assert set(runs) == {'{"difficulty":"hard"}', ""}
    hard_success = sum(e.success for e in store.episodes(runs['{"difficulty":"hard"}']["id"]))
    assert hard_success < 20  # the hard level is not the easy one
    assert main(["leaderboard", "export", "--format", "csv", "--results", str(db)]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted(r["env_options"] for r in rows if r["kind"] != "reported") == ["", "difficulty=hard"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{difficulty: hard}", "is not JSON"),
        ('["hard"]', "must be a JSON object"),
        ('{"source": "hf"}', "give the source with --source"),
    ],
)
def test_bad_env_kwargs_are_refused(text, message):
    with pytest.raises(Exception, match=message):
        parse_env_kwargs(text)


def test_eval_with_an_unknown_level_or_option_is_a_usage_error(capsys):
    base = ["eval", "--policy", "scripted", "--env", "AgentR1/GSM8K-v0", "--episodes", "1"]
    assert main([*base, "--env-kwargs", '{"difficulty": "extreme"}']) == 2
    assert "unknown difficulty 'extreme'" in capsys.readouterr().err
    assert main([*base, "--env-kwargs", '{"colour": 1}']) == 2
    assert "unknown option(s) ['colour']" in capsys.readouterr().err


def test_a_suite_run_with_options_skips_the_envs_that_do_not_take_them(tmp_path):
    jobs = [
        Job("AgentR1/ToolEnv-v0", "lookup", "scripted", episodes=2, env_kwargs='{"difficulty":"hard"}'),
        Job("AgentR1/GSM8K-v0", "synthetic", "oracle", episodes=2, env_kwargs='{"difficulty":"hard"}'),
    ]
    tool, gsm = run_jobs(jobs, tmp_path / "r.sqlite", workers=1)
    assert tool.status == "skipped" and "does not take --env-kwargs" in tool.message
    assert gsm.status == "done" and gsm.successes == 2


def test_run_keys_without_options_are_as_before_so_old_results_resume():
    assert RunMeta("AgentR1/GSM8K-v0", "synthetic", "random", 0, 5).key == '["AgentR1/GSM8K-v0","synthetic","random",0]'
    with_options = RunMeta("AgentR1/GSM8K-v0", "synthetic", "random", 0, 5, env_kwargs='{"difficulty":"hard"}')
    assert with_options.key.endswith(',{"env_kwargs":{"difficulty":"hard"}}]')


def test_a_results_file_from_before_env_options_gets_the_column(tmp_path):
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, suite TEXT, env_id TEXT "
        "NOT NULL, env_version TEXT, source TEXT, policy TEXT NOT NULL, policy_kind TEXT, seed INTEGER, "
        "episodes INTEGER, package_version TEXT, git_commit TEXT, started_at TEXT, updated_at TEXT, "
        "status TEXT, message TEXT);"
        "INSERT INTO runs (key, env_id, policy) VALUES ('k', 'AgentR1/GSM8K-v0', 'random');"
    )
    con.commit()
    con.close()
    store = ResultsStore(db)
    assert [(r["key"], r["env_kwargs"]) for r in store.runs()] == [("k", None)]
    store.begin_run(RunMeta("AgentR1/GSM8K-v0", "synthetic", "random", 0, 5, env_kwargs='{"difficulty":"hard"}'))
    assert sorted(str(r["env_kwargs"]) for r in store.runs()) == ["None", '{"difficulty":"hard"}']


def test_the_full_suite_runs_every_level_and_quick_keeps_easy():
    levels = {}
    for entry in SUITES["full"]:
        levels.setdefault(entry.env_id, set()).add(dict(entry.env_kwargs).get("difficulty", "easy"))
    assert levels.pop("AgentR1/ToolEnv-v0") == {"easy"}  # hand-written tasks: no levels
    assert all(v == {"easy", "medium", "hard"} for v in levels.values()), levels
    assert all(not e.env_kwargs for e in SUITES["quick"] if not e.train)
    (trained,) = [e for e in SUITES["quick"] if e.train]  # the trained agent's own options, at the easy level
    assert "difficulty" not in dict(trained.env_kwargs) and not any(e.train for e in SUITES["full"])
