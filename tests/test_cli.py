"""The ``agentgym-r1`` command: eval, and leaderboard run / show / export."""

from __future__ import annotations

import csv
import io

import pytest

from agentgym_r1.cli import build_parser, main


def test_eval_prints_the_summary(capsys):
    assert (
        main(
            [
                "eval",
                "--policy",
                "scripted",
                "--env",
                "AgentR1/GSM8K-v0",
                "--source",
                "synthetic",
                "--episodes",
                "5",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "AgentR1/GSM8K-v0 policy=scripted source=synthetic episodes=5" in out
    assert "success 1.000 (95% CI 0.566-1.000)" in out  # Wilson, as on the board (not Wald's "± 0.000")
    assert "accuracy %" in out and "100.0 [56.6, 100.0]" in out  # the board's own row for the run
    assert "results in " in out and "agentgym-r1-eval-" in out  # a temporary store by default


def test_eval_writes_its_store_and_resumes_from_it(tmp_path, capsys):
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
        "4",
        "--samples",
        "2",
        "--results",
        str(db),
    ]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "episodes=8" in first and "pass@2 %" in first
    from agentgym_r1.leaderboard.store import ResultsStore

    store = ResultsStore(db)
    (run,) = store.runs()
    stamps = [e.finished_at for e in store.episodes(run["id"])]
    store.close()
    assert main(argv) == 0  # nothing left to play: the stored episodes are read back, not played again
    assert "episodes=8" in capsys.readouterr().out
    store = ResultsStore(db)
    assert [e.finished_at for e in store.episodes(run["id"])] == stamps


def test_eval_on_toolenv_uses_the_lookup_source(capsys):
    assert main(["eval", "--policy", "scripted", "--env", "AgentR1/ToolEnv-v0", "--episodes", "3"]) == 0
    assert "success 1.000" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "scripted", "--env", "AgentR1/Nope-v0"], "unknown env id 'AgentR1/Nope-v0'"),
        (["--policy", "nope", "--env", "AgentR1/GSM8K-v0"], "unknown policy 'nope' for AgentR1/GSM8K-v0"),
        (["--policy", "openai:nohost#m", "--env", "AgentR1/GSM8K-v0"], "openai:http://HOST:PORT/v1#MODEL"),
        (["--policy", "hf:/x?temperature=1", "--env", "AgentR1/GSM8K-v0"], "unknown option(s) ['temperature']"),
        (["--policy", "hf:/no/such/dir", "--env", "AgentR1/GSM8K-v0"], "hf:/no/such/dir: no such model directory"),
        (
            ["--policy", "scripted", "--env", "AgentR1/GSM8K-v0", "--samples", "0"],
            "argument --samples: must be at least 1",
        ),
        (
            ["--policy", "scripted", "--env", "AgentR1/GSM8K-v0", "--concurrency", "0"],
            "argument --concurrency: must be at least 1",
        ),
    ],
)
def test_bad_input_is_a_clear_message_not_a_traceback(argv, message, capsys):
    assert main(["eval", *argv, "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_leaderboard_run_show_and_export(tmp_path, capsys):
    db = tmp_path / "lb.sqlite"
    assert (
        main(
            [
                "leaderboard",
                "run",
                "--suite",
                "quick",
                "--results",
                str(db),
                "--episodes",
                "4",
                "--workers",
                "1",
                "--env",
                "AgentR1/ToolEnv-v0",
                "--env",
                "AgentR1/WebShop-v0",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "ToolEnv-v0 scripted" not in captured.err  # no progress bars when stderr is not a terminal
    assert "== AgentR1/ToolEnv-v0 (lookup)" in captured.out
    assert (tmp_path / "lb.html").read_text().count('<svg class="plot"') == 2
    assert main(["leaderboard", "show", "--results", str(db)]) == 0
    assert "scripted" in capsys.readouterr().out
    assert main(["leaderboard", "export", "--format", "csv", "--results", str(db)]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["policy"] for r in rows if r["env_id"] == "AgentR1/ToolEnv-v0"} == {"random", "scripted", "oracle"}
    out = tmp_path / "board.md"
    assert main(["leaderboard", "export", "--format", "md", "--results", str(db), "-o", str(out)]) == 0
    assert "## AgentR1/ToolEnv-v0" in out.read_text()


def test_show_with_no_results_says_how_to_get_some(tmp_path, capsys):
    assert main(["leaderboard", "show", "--results", str(tmp_path / "none.sqlite")]) == 0
    assert "leaderboard run --suite quick" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--suite", "huge"], "unknown suite 'huge'"),
        (["--env", "AgentR1/Nope-v0"], "['AgentR1/Nope-v0'] not in suite 'quick'"),
        (["--episodes", "0"], "argument --episodes: must be at least 1"),
    ],
)
def test_leaderboard_run_bad_input(argv, message, tmp_path, capsys):
    assert main(["leaderboard", "run", "--results", str(tmp_path / "r.sqlite"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_corrupted_results_file_is_reported_and_rebuilt(tmp_path, capsys):
    db = tmp_path / "lb.sqlite"
    assert (
        main(
            [
                "eval",
                "--policy",
                "scripted",
                "--env",
                "AgentR1/GSM8K-v0",
                "--source",
                "synthetic",
                "--episodes",
                "3",
                "--results",
                str(db),
            ]
        )
        == 0
    )
    db.write_bytes(b"not a database at all" * 50)
    capsys.readouterr()
    assert main(["leaderboard", "show", "--results", str(db)]) == 0
    captured = capsys.readouterr()
    assert "could not be read" in captured.err and "rebuilt 3 episode(s) of 1 run(s)" in captured.err
    assert "scripted" in captured.out


BAD_NUMBERS = [  # each crashed (OverflowError, numpy's ValueError, MemoryError) or was taken as it was
    ("--seed", str(10**20), "argument --seed: must be at most 4294967295"),
    ("--seed", "-5", "argument --seed: must be at least 0"),
    ("--seed", "1e3", "argument --seed: must be an integer"),
    ("--episodes", str(10**11), "argument --episodes: must be at most 100000"),
    ("--samples", "1001", "argument --samples: must be at most 1000"),
    ("--timeout", "inf", "argument --timeout: must be a finite number of seconds above 0"),
    ("--timeout", "nan", "argument --timeout: must be a finite number of seconds above 0"),
    ("--env-workers", "-1", "argument --env-workers: must be at least 0"),
]


@pytest.mark.parametrize(("flag", "value", "message"), BAD_NUMBERS)
@pytest.mark.parametrize("command", ["eval", "leaderboard run"])
def test_numbers_out_of_range_are_usage_errors_naming_the_flag(command, flag, value, message, tmp_path, capsys):
    results = tmp_path / "r.sqlite"
    argv = (
        ["eval", "--policy", "scripted", "--env", "AgentR1/GSM8K-v0"]
        if command == "eval"
        else ["leaderboard", "run", "--env", "AgentR1/GSM8K-v0"]
    )
    assert main([*argv, "--results", str(results), flag, value]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not results.exists()  # refused before any work


def test_episodes_times_samples_is_bounded_before_any_work(tmp_path, capsys):
    results = tmp_path / "r.sqlite"
    assert (
        main(
            [
                "eval",
                "--policy",
                "scripted",
                "--env",
                "AgentR1/GSM8K-v0",
                "--results",
                str(results),
                "--episodes",
                "100000",
                "--samples",
                "2",
            ]
        )
        == 2
    )
    assert "--episodes x --samples must be at most 100000" in capsys.readouterr().err
    assert not results.exists()


def test_the_largest_seed_runs(tmp_path, capsys):
    assert (
        main(
            [
                "eval",
                "--policy",
                "scripted",
                "--env",
                "AgentR1/GSM8K-v0",
                "--source",
                "synthetic",
                "--episodes",
                "2",
                "--seed",
                str(2**32 - 1),
                "--results",
                str(tmp_path / "r.sqlite"),
            ]
        )
        == 0
    )
    assert "episodes=2" in capsys.readouterr().out


SERVERS = [["retriever", "--index", "nowhere"], ["env", "AgentR1/GSM8K-v0"], ["mcp", "AgentR1/HotpotQA-v0"]]


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("port", ["65536", "-1", "http", "8e3"])
def test_a_server_port_outside_0_to_65535_is_a_usage_error(server, port, capsys):
    """One argparse type for every server's --port, refusing anything else with the range, before any work."""
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["serve", *server, "--port", port])
    assert stop.value.code == 2
    assert f"argument --port: must be a port number from 0 to 65535, got {port!r}" in capsys.readouterr().err


@pytest.mark.parametrize("server", SERVERS)
def test_a_server_takes_port_0_to_65535(server):
    assert [build_parser().parse_args(["serve", *server, "--port", p]).port for p in ("0", "65535")] == [0, 65535]
