"""The mask ablation's analysis (``benchmarks/ppo_masks.py``) on constructed outcomes: a variant that solves what
another solves and more gets a positive paired difference whose bootstrap interval excludes 0; equal rows get 0; a
run scored on other questions than the start is refused."""

from __future__ import annotations

import json

import numpy as np
import ppo_masks  # tests/benchmarks/conftest.py puts benchmarks/ on sys.path
import pytest

QUESTIONS = list(range(5_000_000, 5_000_200))


def write(out, name, solved, seeds=QUESTIONS):
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / f"{name}.ablation.json").write_text(json.dumps({"run": name, "solved": solved, "seeds": seeds}))


def test_the_report_orders_the_variants_and_bounds_the_differences(tmp_path):
    rng = np.random.default_rng(0)
    write(tmp_path, "eval-start", [int(x) for x in rng.random(200) < 0.2])
    for seed in range(4):
        base = rng.random(200)
        rates = {"ppo": 0.4, "ppo-noadv": 0.4, "ppo-noloss": 0.3, "ppo-noadv-noloss": 0.1}
        for variant, rate in rates.items():
            write(tmp_path, f"{variant}-seed{seed}", [int(x) for x in base < rate])
    table = ppo_masks.report(tmp_path, [0, 1, 2, 3])
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| ")}
    assert "| full masks - without the advantage mask" in rows  # the same outcomes: no difference at all
    assert "+0.0 [+0.0, +0.0]" in rows["| full masks - without the advantage mask"]
    diff = rows["| without the advantage mask - without either mask"]
    low = float(diff.split("[")[1].split(",")[0])
    assert low > 0, diff


def test_a_run_scored_on_other_questions_is_refused(tmp_path):
    write(tmp_path, "eval-start", [0] * 200)
    for variant in ppo_masks.VARIANTS:
        write(tmp_path, f"{variant}-seed0", [1] * 200, QUESTIONS if variant != "ppo-noloss" else QUESTIONS[::-1])
    with pytest.raises(ValueError, match="ppo-noloss-seed0 was scored on other questions"):
        ppo_masks.report(tmp_path, [0])
