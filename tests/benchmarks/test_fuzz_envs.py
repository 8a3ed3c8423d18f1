"""The fuzz campaign (``benchmarks/fuzz_envs.py``) at a small size: every env with every parser (the env's own,
``parser="auto"`` outside the engine and each model family's, Gemma 4 included), the named and native worst shapes,
no exception; and the memory mode's transcripts stay bounded after over-long actions."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import agentgym_r1

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fuzz_envs.py"), *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_short_fuzz_campaign_raises_nothing_on_any_env_with_any_parser():
    out = _run("--count", "5", "--max-chars", "5000", "--budget-s", "5")
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-5000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("AgentR1/")]
    parsers = {row[1] for row in rows}
    assert {"default", "auto", "command", "tag"} <= parsers, parsers
    if importlib.util.find_spec("trl") is not None:  # the families' parsers need TRL's templates
        assert {"gemma4", "gptoss", "qwen3", "llama3_1"} <= parsers, parsers
    assert {row[0] for row in rows} == set(agentgym_r1.env_ids())
    assert all(int(row[3]) == 0 and int(row[2]) > 0 for row in rows), out.stdout  # steps taken, no exception
    assert "exceptions: 0" in out.stdout


def test_memory_mode_keeps_transcripts_bounded():
    out = _run("--big-actions", "0.3", "--env", "AgentR1/ToolEnv-v0", "--env", "AgentR1/WebShop-v0")
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("AgentR1/")]
    assert len(rows) == 2 and all(int(row[2].replace(",", "")) < 600_000 for row in rows), out.stdout
