"""The server-side fuzz campaign (``benchmarks/fuzz_servers.py``) at a small size: the env, model and retriever servers
answer every hostile request without a 5xx, a dropped session or a hang, and a small request is served beside the
longest legal one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

for module in ("openenv.core", "uvicorn", "httpx", "fastapi", "tantivy", "torch", "transformers"):
    pytest.importorskip(module)


def test_short_server_fuzz_campaign_finds_no_error():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fuzz_servers.py"), "--count", "5", "--max-chars", "20000"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    rows = {
        m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"^(\w+ server): tried (\d+), errors (\d+)", out.stdout, re.M)
    }
    assert set(rows) == {"env server", "model server", "retriever server"}, out.stdout
    assert all(tried > 50 and errors == 0 for tried, errors in rows.values()), rows
    assert "beside the longest legal request" in out.stdout
