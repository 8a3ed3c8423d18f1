"""The short version of ``benchmarks/openenv_soak.py``: the real server command in a subprocess, 16 concurrent sessions
of openenv-core's client, sessions opened and closed every few episodes; afterwards no session is left and the
server holds no more file descriptors than when idle. Bounded by episodes, not time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script
from tests.serve.conftest import skip_without_serve

skip_without_serve()

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak():
    if not Path("/proc/self/fd").exists():
        pytest.skip("the soak reads the server's memory and descriptors from /proc (Linux)")
    return load_script("benchmarks/openenv_soak.py", register=True)


def test_short_soak_leaves_no_session_and_no_descriptor(soak, capsys):
    r = soak.run(episodes=240, sessions=16, reconnect_every=5, samples=4)
    assert r["errors"] == []
    assert r["episodes"] == 240 and r["steps"] == 3 * 240  # every GSM8K episode: call, broken call, answer
    assert r["live_envs_after"] == 0
    assert r["max_fds"] > r["idle_fds"]  # the sessions' sockets were counted while open...
    assert r["fds_after"] <= r["idle_fds"]  # ...and every one was closed
    assert soak.report(r, "AgentR1/GSM8K-v0", 16, 5, max_growth_mib=64.0)
    out = capsys.readouterr().out
    assert "240 episodes, 720 steps, 16 sessions" in out and out.rstrip().endswith("flat: yes")
