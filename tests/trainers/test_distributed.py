"""GRPO and PPO under ``accelerate launch --num_processes 2`` (CPU, gloo) take the same step as one process on the
same fixed batch: advantages, loss and parameter update, with each group's samples split across the processes
(C1: GRPO crashed there; C2: PPO's critic broke DDP)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]


def _launch(algo: str, processes: int, tmp_path: Path) -> dict:
    out = tmp_path / f"{algo}-{processes}.pt"
    launcher = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or "accelerate"
    cmd = [launcher, "launch", "--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "--cpu", "-m", "tests.trainers.dist_step", algo, str(out),
           str(tmp_path / f"run-{algo}-{processes}")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_two_processes_take_the_single_process_step(tmp_path, algo) -> None:
    one, two = _launch(algo, 1, tmp_path), _launch(algo, 2, tmp_path)
    assert one["advantages"].abs().sum() > 0
    torch.testing.assert_close(two["advantages"], one["advantages"], rtol=1e-4, atol=1e-5)
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-3, abs=1e-6)
    assert any(u.abs().sum() > 0 for u in one["update"])
    for a, b in zip(two["update"], one["update"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-6)
