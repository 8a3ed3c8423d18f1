"""The ALFWorld learning analysis (``benchmarks/alfworld_confirm.py``) on result files written here as ``eval``
writes them: a clear gain on the generated games is learning shown, no gain is not, GRPO against the continued-SFT
control, each part paired game by game, a partial study said as partial, and rows scored on other games refused."""

from __future__ import annotations

import json
from pathlib import Path

import alfworld_confirm as confirm
import numpy as np
import pytest
import study as study_tools


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    """1,000 bootstrap resamples: the verdicts here are far from their thresholds."""
    monkeypatch.setattr(study_tools, "RESAMPLES", 1000)


def part(won: np.ndarray, prefix: str) -> dict:
    rate = float(won.mean())
    per_game = [
        {"game": f"{prefix}-{i}", "success": bool(w), "turns": 5, "end": "terminated"} for i, w in enumerate(won)
    ]
    return {
        "n": int(won.size),
        "success": rate,
        "success_ci": [max(rate - 0.05, 0), min(rate + 0.05, 1)],
        "per_game": per_game,
    }


def write(path: Path, generated: float, real: float, rng: np.random.Generator, n: int = 200) -> dict:
    """A result as ``eval`` writes it: ``n`` generated games and 24 real ones, each won with the given chance."""
    row = {
        "generated": part(rng.random(n) < generated, "generated-3"),
        "real": part(rng.random(24) < real, "valid_unseen/game"),
        "draw": {},
        "provenance": {"commit": "0123456789abcdef", "dirty": False, "protocol": None},
    }
    path.write_text(json.dumps(row))
    return row


def study(root: Path, start: float, grpo: list[float | None], control: float | None) -> dict:
    rng = np.random.default_rng(0)
    rows = {"start": write(root / "final_sft.json", start, 0.0, rng)}
    for s, p in enumerate(grpo):
        if p is not None:
            rows[s] = write(root / f"final_grpo-seed{s}.json", p, 0.1, rng)
    if control is not None:
        rows["control"] = write(root / "final_sft-continued.json", control, 0.0, rng)
    return rows


def gain(text: str, what: str) -> tuple[float, float, float]:
    line = next(x for x in text.splitlines() if x.startswith(f"**{what}"))
    point, low, high = line.split("success ")[1].split("]")[0].replace("[", "").replace(",", "").split()
    return float(point), float(low), float(high)


def test_a_clear_gain_on_the_generated_games_is_learning_shown_and_beats_a_control_that_did_not_move(tmp_path):
    rows = study(tmp_path, 0.2, [0.5, 0.45, 0.55, 0.5], control=0.2)
    text = confirm.report(tmp_path)
    assert "learning is **shown**" in text and "GRPO is **better** than continued SFT" in text
    assert "Partial" not in text and "**GRPO - SFT start, real games**" in text and "no claim rests on it" in text
    point, low, high = gain(text, "GRPO - SFT start, generated")
    won = {k: np.array([o["success"] for o in rows[k]["generated"]["per_game"]]) for k in ("start", 0, 1, 2, 3)}
    expected = 100 * (np.mean([won[s].mean() for s in range(4)]) - won["start"].mean())
    assert point == pytest.approx(expected, abs=0.05) and 0 < low < point < high
    gained, lost = int((won[0] & ~won["start"]).sum()), int((won["start"] & ~won[0]).sum())
    assert text.split("| GRPO seed 0 |")[1].split("|")[1].strip().startswith(f"{gained} / {lost}, p = ")


def test_no_gain_is_not_learning_and_a_control_as_good_is_not_beaten(tmp_path):
    study(tmp_path, 0.3, [0.3, 0.3, 0.3, 0.3], control=0.5)
    text = confirm.report(tmp_path)
    assert "learning is **not shown**" in text and "GRPO is **not shown** better than continued SFT" in text
    assert gain(text, "GRPO - continued SFT, generated")[2] < 0  # the control is clearly better here


def test_a_missing_seed_and_control_are_said_as_partial(tmp_path):
    study(tmp_path, 0.2, [0.5, 0.5, None, 0.5], control=None)
    text = confirm.report(tmp_path)
    assert "**Partial**: not run yet: GRPO seeds [2] and the continued-SFT control" in text
    assert "learning is **shown**" in text and "continued SFT**" not in text  # pooled over the seeds there are
    assert "no start result" in confirm.report(tmp_path / "nothing")


def test_rows_on_other_games_or_without_outcomes_are_refused(tmp_path):
    study(tmp_path, 0.2, [0.5, 0.5], control=None)
    row = json.loads((tmp_path / "final_grpo-seed1.json").read_text())
    row["real"]["per_game"][3]["game"] = "valid_unseen/another"
    (tmp_path / "final_grpo-seed1.json").write_text(json.dumps(row))
    with pytest.raises(ValueError, match="other real games than the start"):
        confirm.report(tmp_path)
    del row["generated"]["per_game"]
    (tmp_path / "final_grpo-seed1.json").write_text(json.dumps(row))
    with pytest.raises(ValueError, match="no per-game outcomes on its generated games"):
        confirm.report(tmp_path)


def test_the_command_prints_the_analysis(tmp_path, monkeypatch, capsys):
    study(tmp_path, 0.2, [0.5, 0.5, 0.5, 0.5], control=0.2)
    monkeypatch.setattr("sys.argv", ["alfworld_confirm.py", str(tmp_path)])
    confirm.main()
    out = capsys.readouterr().out
    assert "learning is **shown**" in out and "| continued SFT (control) |" in out
    monkeypatch.setattr("sys.argv", ["alfworld_confirm.py", str(tmp_path / "none")])
    with pytest.raises(SystemExit):
        confirm.main()
    assert "is not a directory" in capsys.readouterr().err
