"""The HotpotQA confirmatory analysis (``benchmarks/hotpotqa_confirm.py``) on result files written here: the ratio
to the start and its interval, the verdicts of the protocol's rule, and refusing a row scored on other questions."""

from __future__ import annotations

import json

import hotpotqa_confirm as confirm
import numpy as np
import pytest
import study as study_tools


def write(path, solved, seeds, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    by_type = {"bridge": float(np.mean(solved[::2])), "comparison": float(np.mean(solved[1::2]))}
    path.write_text(
        json.dumps({"run": path.stem, "solved": [int(x) for x in solved], "seeds": seeds, "by_type": by_type, **extra})
    )


def study(root, start_em, run_ems, n=400, held="fresh", rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    seeds = list(range(100, 100 + n))
    write(root / "confirm" / "results" / f"eval-start.{held}.json", rng.random(n) < start_em, seeds)
    for s, em in enumerate(run_ems):
        write(root / "confirm" / "results" / f"rloo-concatenated-seed{s}.{held}.json", rng.random(n) < em, seeds)
    return seeds


def test_a_clear_doubling_is_confirmed_and_every_row_is_tabled(tmp_path):
    seeds = study(tmp_path, 0.15, [0.5] * 8, n=1000)
    rng = np.random.default_rng(5)
    write(tmp_path / "confirm-rag" / "results" / "rag.fresh.json", rng.random(1000) < 0.2, seeds, rag_k=3, steps=1740)
    text = confirm.report(tmp_path)
    assert "2x is **confirmed**" in text and "RL is better than its start" in text
    assert "naive RAG, top-k, same number of updates (k = 3), 1740 steps" in text
    assert "continued SFT, same wall time | not run" in text
    assert "no start result" in text  # the disjoint set is not scored in this toy study
    line = next(x for x in text.splitlines() if x.startswith("**Ratio"))
    point, low, high = (
        float(v) for v in line.split("R = ")[1].split(":")[0].replace("[", "").replace("]", "").replace(",", "").split()
    )
    assert low < point < high and low >= 2


def test_a_ratio_near_two_with_a_wide_interval_is_not_confirmed(tmp_path):
    study(tmp_path, 0.2, [0.41, 0.39, 0.42, 0.40], n=300)
    text = confirm.report(tmp_path, [0, 1, 2, 3])
    line = next(x for x in text.splitlines() if x.startswith("**Ratio"))
    assert "RL is better than its start" in line
    assert ("2x is **not confirmed**" in line) or ("2x is **not reached**" in line)
    assert "2x is **confirmed**" not in line


def test_partial_seeds_are_said_and_no_gain_is_not_called_better(tmp_path):
    study(tmp_path, 0.3, [0.3, 0.3], n=500)
    text = confirm.report(tmp_path, [0, 1, 2])
    assert "RL seeds not run yet: [2]" in text
    assert "RL is **not shown** better than its start" in text


def test_the_ratio_interval_resamples_seeds_and_questions():
    runs = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], dtype=float)
    start = np.array([1, 0, 0, 0], dtype=float)
    draws = study_tools.resample_indices(2, 4, np.random.default_rng(0))
    point, low, high = confirm.ratio(runs, start, draws)
    assert point == pytest.approx(1.5)
    assert low <= point <= high and high > low
    d, dl, dh = confirm.difference(runs, start, draws)
    assert d == pytest.approx(0.125) and dl <= d <= dh


def test_a_row_scored_on_other_questions_is_refused(tmp_path):
    seeds = study(tmp_path, 0.2, [0.3], n=50)
    write(tmp_path / "confirm-sft-updates" / "results" / "eval-sft.fresh.json", [0] * 50, seeds[::-1], steps=1740)
    with pytest.raises(ValueError, match="other questions than the start"):
        confirm.report(tmp_path, [0])
