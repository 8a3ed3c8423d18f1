"""The sampling benchmark's phases run end to end at a toy size: its start through today's SFT path (the script
imported a helper that SFT through TRL removed, and failed before its first step), and one condition's GRPO step."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

import sampling_bench  # tests/benchmarks/conftest.py puts benchmarks/ on sys.path


@pytest.mark.timeout(600)
def test_the_start_and_a_condition_run_and_are_reported(tmp_path, capsys):
    sampling_bench.run_sft(tmp_path, steps=2, demos=6, held=3)
    start = json.loads((tmp_path / "sft.json").read_text())
    assert start["steps"] == 2 and len(start["held_out"]) == 3
    assert (tmp_path / "sft" / "config.json").exists() and (start["hidden"], start["layers"]) == (96, 2)
    sampling_bench.run_dev(tmp_path, 2)  # the start's strength on the development generator, every level
    dev = json.loads((tmp_path / "dev.json").read_text())
    assert dev["seed"] != sampling_bench.HELD_OUT["seed"] and set(dev["solved"]) == {"easy", "medium", "hard"}
    assert all(0 <= v <= 2 for v in dev["solved"].values())

    sampling_bench.run_condition(tmp_path, "dynamic", episodes=1, held=3, lr=3e-4, seed=0)
    row = json.loads((tmp_path / "dynamic.json").read_text())
    assert row["updates"] == 1 and row["episodes"] >= 32  # one step of 8 tasks x 4 samples, refills counted
    assert any(k.startswith("sampling/") for entry in row["log"] for k in entry)

    sampling_bench.report(tmp_path)
    table = capsys.readouterr().out
    assert "| start (SFT) |" in table and "| dynamic | 1 |" in table and "| uniform | not run |" in table


@pytest.mark.timeout(600)
def test_the_hotpotqa_bench_scores_new_hard_questions(tmp_path, capsys):
    """HotpotQA's bench: the start and a condition run on it; its held-out and development questions are hard (and
    each level's) questions from far reset seeds, none of them a training question."""
    sampling_bench.run_sft(tmp_path, steps=1, demos=6, held=2, size=(32, 1), bench=sampling_bench.HOTPOTQA)
    start = json.loads((tmp_path / "sft.json").read_text())
    assert start["env"] == "hotpotqa" and len(start["held_out"]) == 2 and start["provenance"]["commit"]
    sampling_bench.run_dev(tmp_path, 1)
    assert set(json.loads((tmp_path / "dev.json").read_text())["solved"]) == {"easy", "medium", "hard"}
    sampling_bench.run_condition(tmp_path, "uniform", episodes=1, held=2, lr=3e-4, seed=0)
    row = json.loads((tmp_path / "uniform.json").read_text())
    assert row["updates"] == 1 and row["config"]["env_kwargs"]["difficulty"] == "hard"
    sampling_bench.run_condition(tmp_path, "uniform", episodes=1, held=2, lr=3e-4, seed=1, temperature=0.6)
    again = json.loads((tmp_path / "uniform-seed1.json").read_text())  # a second seed beside the first
    assert (again["seed"], again["temperature"]) == (1, 0.6) and row["temperature"] == 1.0
    sampling_bench.report(tmp_path)
    table = capsys.readouterr().out
    assert "| uniform | 1 |" in table and "| uniform-seed1 | 1 |" in table and "| dynamic-seed1 | not run |" in table
    by_type = table.split("\n\n")[-1].splitlines()  # HotpotQA's rows by question type, counts of the 2 questions
    assert by_type[0].startswith("| run | ") and sum(int(c.split(")")[0]) for c in by_type[0].split("(of ")[1:]) == 2
    assert {line.split(" | ")[0] for line in by_type[2:]} == {"| start (SFT)", "| uniform", "| uniform-seed1"}

    kwargs, seeds = sampling_bench.HOTPOTQA.held(tmp_path, 2)
    assert kwargs["difficulty"] == "hard" and min(seeds) >= sampling_bench.HOTPOT_HELD_FROM
    train = {t.prompt for t in sampling_bench.hotpot_training()}
    assert not train & {t.prompt for t in sampling_bench.hotpot_tasks("hard", seeds)}


def test_a_held_out_set_that_overlaps_training_is_refused_before_training(tmp_path):
    """A cached held-out set holding a training question (reset seed 0) stops the run, naming the overlap."""
    from agentgym_r1.error import HeldOutOverlapError

    key = f"held-hard-{sampling_bench.HOTPOT_HELD_FROM}-2"
    (tmp_path / "questions.json").write_text(json.dumps({key: [0, sampling_bench.HOTPOT_HELD_FROM]}))
    with pytest.raises(HeldOutOverlapError, match="training questions"):
        sampling_bench.run_sft(tmp_path, steps=1, demos=6, held=2, size=(32, 1), bench=sampling_bench.HOTPOTQA)
    assert not (tmp_path / "sft").exists()
