"""The WebShop confirmatory analysis (``benchmarks/webshop_confirm.py``) on result files written here as ``eval``
writes them: a clear gain is learning shown, no gain is not, GRPO against the continued-SFT control, a partial study
said as partial, and rows scored on other tasks refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import study as study_tools
import webshop_confirm as confirm

ROOT = Path(__file__).resolve().parents[2]
FIRST = 4_000_000


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    """2,000 bootstrap resamples in-process (the command's test runs the protocol's 10,000): the verdicts here are far
    from their thresholds."""
    monkeypatch.setattr(study_tools, "RESAMPLES", 2000)


def write(path: Path, success: np.ndarray, rng: np.random.Generator, seeds: list[int] | None = None) -> dict:
    """A result as ``eval`` writes it: a task's score is 1 on success, else a partial score in [0, 0.6)."""
    score = np.where(success, 1.0, rng.random(success.size) * 0.6)
    seeds = seeds or list(range(FIRST, FIRST + success.size))
    row = {
        "n": int(success.size),
        "score": float(score.mean()),
        "score_ci": [float(score.mean()) - 0.02, float(score.mean()) + 0.02],
        "success": float(success.mean()),
        "success_ci": [float(success.mean()) - 0.03, float(success.mean()) + 0.03],
        "seeds": [seeds[0], seeds[-1]],
        "per_task": {"seed": seeds, "score": score.tolist(), "success": success.tolist()},
        "provenance": {"commit": "0123456789abcdef", "dirty": False, "protocol": None},
    }
    path.write_text(json.dumps(row))
    return row


def study(root: Path, start: float, grpo: list[float], control: float | None, n: int = 300) -> dict[str, dict]:
    rng = np.random.default_rng(0)
    rows = {"start": write(root / "final_sft.json", rng.random(n) < start, rng)}
    for s, p in enumerate(grpo):
        if p is not None:
            rows[s] = write(root / f"final_grpo-seed{s}.json", rng.random(n) < p, rng)
    if control is not None:
        rows["control"] = write(root / "final_sft-continued.json", rng.random(n) < control, rng)
    return rows


def interval(text: str, what: str) -> tuple[float, float, float]:
    line = next(x for x in text.splitlines() if x.startswith(f"**{what}**"))
    point, low, high = line.split("score ")[1].split("]")[0].replace("[", "").replace(",", "").split()
    return float(point), float(low), float(high)


def test_a_clear_gain_is_learning_shown_and_grpo_beats_a_control_that_did_not_move(tmp_path):
    rows = study(tmp_path, 0.2, [0.5, 0.45, 0.55, 0.5], control=0.2)
    text = confirm.report(tmp_path)
    assert "learning is **shown**" in text and "GRPO is **better** than continued SFT" in text
    assert "Partial" not in text
    point, low, high = interval(text, "GRPO - SFT start")
    expected = np.mean([rows[s]["score"] for s in range(4)]) - rows["start"]["score"]
    assert point == pytest.approx(expected, abs=5e-4) and 0 < low < point < high
    before, after = (np.array(rows[k]["per_task"]["success"]) for k in ("start", 0))
    gained, lost = int((after & ~before).sum()), int((before & ~after).sum())
    assert "| GRPO seed 0 | " in text and f"| {gained} / {lost}, p = " in text.split("| GRPO seed 0 |")[1]


def test_no_gain_is_not_learning_and_a_control_as_good_is_not_beaten(tmp_path):
    study(tmp_path, 0.3, [0.3, 0.3, 0.3, 0.3], control=0.5)
    text = confirm.report(tmp_path)
    assert "learning is **not shown**" in text and "GRPO is **not shown** better than continued SFT" in text
    _, low, high = interval(text, "GRPO - SFT start")
    assert low <= 0 <= high or high < 0
    assert interval(text, "GRPO - continued SFT")[2] < 0  # the control is clearly better here


def test_a_missing_seed_and_control_are_said_as_partial(tmp_path):
    study(tmp_path, 0.2, [0.5, 0.5, None, 0.5], control=None)
    text = confirm.report(tmp_path)
    assert "**Partial**: not run yet: GRPO seeds [2] and the continued-SFT control" in text
    assert "learning is **shown**" in text and "continued SFT**" not in text  # pooled over the seeds there are
    assert "no start result" in confirm.report(tmp_path / "nothing")


def test_rows_on_other_tasks_or_without_outcomes_are_refused(tmp_path):
    rng = np.random.default_rng(1)
    study(tmp_path, 0.2, [0.5], control=None, n=50)
    write(tmp_path / "final_grpo-seed1.json", rng.random(50) < 0.5, rng, list(range(7, 57)))
    with pytest.raises(ValueError, match="other tasks than the start"):
        confirm.report(tmp_path)
    row = json.loads((tmp_path / "final_grpo-seed0.json").read_text())
    (tmp_path / "final_grpo-seed1.json").write_text(json.dumps({**row, "per_task": None}))
    with pytest.raises(ValueError, match="no per-task outcomes"):
        confirm.report(tmp_path)


def test_the_command_prints_the_analysis(tmp_path):
    study(tmp_path, 0.2, [0.5, 0.5, 0.5, 0.5], control=0.2, n=40)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "webshop_confirm.py"), str(tmp_path)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "learning is **shown**" in done.stdout and "| continued SFT (control) |" in done.stdout
