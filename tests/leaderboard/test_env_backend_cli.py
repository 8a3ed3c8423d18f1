"""``--env-backend`` on eval and the board: hf: episodes play the same on worker processes as on threads, and bad
backend options stop the command with one line before any work."""

from __future__ import annotations

import socket

import pytest

from agentgym_r1.cli import main
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.store import ResultsStore

GSM8K = "AgentR1/GSM8K-v0"


def test_hf_policy_plays_the_same_episodes_with_envs_in_worker_processes(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer

    path = tmp_path / "tiny"
    corpus = ["<tool_call> calculator expression answer 1 2 3 + * </tool_call> <answer> </answer> has how many"] * 20
    make_model(train_tokenizer(corpus, path, vocab_size=300), path, hidden=16, layers=1, heads=2)
    played = {}
    for backend in ("thread", "process"):
        job = Job(
            GSM8K,
            "synthetic",
            f"hf:{path}?max_new_tokens=8",
            episodes=4,
            concurrency=4,
            env_backend=backend,
            env_workers=2,
        )
        (outcome,) = run_jobs([job], tmp_path / f"{backend}.sqlite", workers=1)
        assert outcome.status == "done" and outcome.episodes == 4, outcome.message
        store = ResultsStore(tmp_path / f"{backend}.sqlite")
        played[backend] = [
            (e.seed, e.task_id, e.reward, e.turns, e.invalid, e.success, e.error)
            for e in store.episodes(store.runs()[0]["id"])
        ]
        store.close()
    assert played["process"] == played["thread"] and len(played["thread"]) == 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--env-workers", "-1"], "--env-workers: must be at least 0, got -1"),
        (["--env-backend", "ray", "--ray-address", "127.0.0.1:PORT"], "cannot be reached"),
    ],
)
def test_bad_env_backend_options_are_one_line(extra, message, capsys):
    if "ray" in extra:
        pytest.importorskip("ray", reason="the ray extra is not installed")
    extra = [a.replace("PORT", str(_free_port())) for a in extra]
    assert main(["eval", "--policy", "scripted", "--env", GSM8K, "--episodes", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_unknown_env_backend_is_refused_by_the_parser(capsys):
    assert main(["eval", "--policy", "scripted", "--env", GSM8K, "--env-backend", "fork"]) == 2
    assert "invalid choice: 'fork'" in capsys.readouterr().err
