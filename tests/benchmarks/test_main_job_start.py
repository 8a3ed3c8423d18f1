"""The start-rule development runs (``benchmarks/main_job_start.py``): the SFT is read at the named steps on the
monitoring and development sets, each read checkpoint is saved, the reads leave the SFT's steps as they are (greedy
play draws no random numbers), the table shows the step the monitoring set picks, and a protocol's held-out generator
is refused as a monitoring or development set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import main_job_start
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
BUDGET = {
    "sft_steps": 4,
    "sft_episodes": 16,
    "sft_batch": 4,
    "layers": 1,
    "hidden": 32,
    "vocab": 300,
    "tokenizer_episodes": 20,
    "max_new_tokens": 16,
}


def test_reads_at_the_named_steps_save_checkpoints_and_leave_the_sft_as_it_is(tmp_path):
    from agentgym_r1.adapters.loading import load_model
    from agentgym_r1.leaderboard.training import TrainBudget, sft_start, train_sft

    out = tmp_path / "start"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "main_job_start.py"), "--seeds", "1", "--threads", "1"]
    cmd += ["--out", str(out), "--first-step", "2", "--every", "2", "--monitor", "5", "--dev", "3"]
    cmd += ["--budget", json.dumps(BUDGET)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = json.loads((out / "seed1-default.json").read_text(encoding="utf-8"))
    assert [r["step"] for r in run["reads"]] == [2, 4]
    assert all(len(r["monitor"]) == 5 and len(r["dev"]) == 3 and set(r["monitor"] + r["dev"]) <= {"0", "1"}
               for r in run["reads"])  # fmt: skip
    assert run["provenance"]["commit"] and (run["monitor_seed"], run["dev_seed"]) == (21, 2)

    # the same SFT without reads, in this process on one thread: the same weights as the read run's last checkpoint
    torch.set_num_threads(1)
    budget = TrainBudget(**{**BUDGET, "seed": 1})
    tokenizer, model, rows = sft_start(budget)
    train_sft(budget, tokenizer, model, rows, None)
    saved = load_model(str(out / "seed1-default" / "step4"), "the read checkpoint", device="cpu")
    for (name, a), b in zip(model.state_dict().items(), saved.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)
    assert (out / "seed1-default" / "step2" / "config.json").exists()


def test_the_table_shows_the_step_the_monitoring_set_picks(tmp_path):
    reads = [
        {"step": 450, "monitor": "1100", "dev": "1000"},
        {"step": 500, "monitor": "1110", "dev": "1110"},  # the best monitoring score: picked
        {"step": 550, "monitor": "1000", "dev": "0000"},
    ]
    run = {"seed": 0, "kernels": "avx2", "torch_capability": "AVX2", "reads": reads,
           "provenance": {"commit": "b" * 40, "dirty": False}}  # fmt: skip
    (tmp_path / "seed0-avx2.json").write_text(json.dumps(run), encoding="utf-8")
    assert main_job_start.pick(reads)["step"] == 500
    assert main_job_start.pick([*reads, {"step": 600, "monitor": "0111", "dev": "1"}])["step"] == 600  # a tie: later
    row = main_job_start.table(tmp_path).splitlines()[-1]
    assert row.startswith("| 0 | avx2 (AVX2) | 0.0 [") and "| 500 (3/4) | 75.0 [" in row and "| 0.0-75.0 |" in row


@pytest.mark.parametrize("flag", ["--monitor-seed", "--dev-seed"])
def test_a_protocols_held_out_generator_is_refused(flag):
    with pytest.raises(SystemExit):
        main_job_start.main([flag, "3", "--seeds", "0"])
