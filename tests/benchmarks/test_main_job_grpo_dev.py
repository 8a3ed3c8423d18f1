"""GRPO development runs from a saved SFT checkpoint (``benchmarks/main_job_grpo_dev.py``): the start and the result
are scored on the same development problems, the config's fields reach the trainer (dynamic sampling generates more
episodes than the updates' batches hold when groups are refilled, and counts them), the table pairs the two rows, and
a protocol's held-out generator is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import main_job_grpo_dev
import pytest

from tests.benchmarks.test_main_job_start import BUDGET as START_BUDGET

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
# the start-rule test's tiny SFT, with a tiny GRPO over it
BUDGET = {
    **START_BUDGET,
    "grpo_steps": 2,
    "grpo_prompts": 2,
    "generations": 2,
    "max_turns": 2,
    "max_completion_length": 48,
}


def test_grpo_from_a_checkpoint_scores_both_rows_on_the_same_problems(tmp_path):
    from agentgym_r1.leaderboard.training import TrainBudget, sft_start, train_sft

    torch.set_num_threads(1)
    budget = TrainBudget(**{**BUDGET, "seed": 1})
    tokenizer, model, rows = sft_start(budget)
    train_sft(budget, tokenizer, model, rows, None)
    start = tmp_path / "sft"
    model.save_pretrained(str(start))
    tokenizer.save_pretrained(str(start))

    out = tmp_path / "runs" / "dyn.json"
    config = {"dynamic_sampling": True, "dynamic_sampling_max_tries": 2}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "main_job_grpo_dev.py"), "--start", str(start), "--seed", "1"]
    cmd += ["--budget", json.dumps(BUDGET), "--config", json.dumps(config), "--dev", "6", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(out.read_text(encoding="utf-8"))
    assert len(r["before"]) == len(r["after"]) == 6 and set(r["before"] + r["after"]) <= {"0", "1"}
    assert r["updates"] == 2 and r["config"] == config and r["provenance"]["commit"]
    # each update plays its batch (2 tasks x 2 samples) and, the tiny start solving nothing, refills every group once
    # (dynamic_sampling_max_tries=2): the config reached the trainer
    assert r["episodes"] == 2 * 4 * 2
    row = main_job_grpo_dev.table([out]).splitlines()[-1]
    assert row.startswith("| dyn | ") and '"dynamic_sampling": true' in row and "| 2 |" in row


def test_a_protocols_held_out_generator_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        main_job_grpo_dev.main(["--start", str(tmp_path), "--out", str(tmp_path / "x.json"), "--dev-seed", "3"])
