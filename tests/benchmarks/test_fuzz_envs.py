"""The fuzz campaign (``benchmarks/fuzz_envs.py``) on a short budget: every env, the worst shapes, no exception."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_short_fuzz_campaign_raises_nothing_on_any_env():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_envs.py"), "--count", "20", "--budget-s", "3"],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("AgentR1/")]
    assert len(rows) >= 7, out.stdout  # every registered env and the parser variants
    assert "exceptions: 0" in out.stdout
