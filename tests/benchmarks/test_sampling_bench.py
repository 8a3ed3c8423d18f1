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
