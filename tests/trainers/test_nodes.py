"""GRPO and PPO under ``torchrun --nnodes 2 --nproc-per-node 1`` (two launchers, one process each, joined by the
c10d rendezvous on 127.0.0.1, as two machines of a cluster would be) take the same step as 2 processes of one
``torchrun --nproc_per_node 2`` on the same fixed batch: advantages, loss and parameter update
(``dist_step``'s batch; ``test_distributed.py`` checks that step against one process)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from tests.trainers.kit import ROOT, torchrun  # noqa: E402

ALGOS = ("grpo", "ppo")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(module: str, *args: str, timeout: float) -> None:
    """Two ``torchrun --nnodes 2 --nproc-per-node 1`` launchers (the node groups) meeting at a c10d rendezvous on
    127.0.0.1; both must exit 0 within ``timeout`` (past it every process of both is killed and the test fails)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"nodes-{port}",
        "--master-addr",
        "127.0.0.1",
        "-m",
        module,
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1"}
    nodes = [
        subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        for _ in range(2)
    ]
    errors = []
    for node in nodes:
        try:
            _, err = node.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for n in nodes:
                if n.poll() is None:
                    os.killpg(n.pid, signal.SIGKILL)
            pytest.fail(f"{module} on two node groups did not finish in {timeout:.0f} s")
        errors.append(err)
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(e[-2000:] for e in errors)


def test_two_node_groups_take_the_one_node_step(tmp_path: Path) -> None:
    one, two = tmp_path / "one-node", tmp_path / "two-nodes"
    torchrun(2, "tests.trainers.dist_many", str(one), str(tmp_path / "run-one"), *ALGOS, timeout=280)
    two_nodes("tests.trainers.dist_many", str(two), str(tmp_path / "run-two"), *ALGOS, timeout=280)
    for algo in ALGOS:
        a = torch.load(f"{one}-{algo}.pt", weights_only=False)
        b = torch.load(f"{two}-{algo}.pt", weights_only=False)
        assert a["processes"] == b["processes"] == 2
        assert a["advantages"].abs().sum() > 0 and any(u.abs().sum() > 0 for u in a["update"])
        # the same world size, ranks and gloo collectives: the same float operations in the same order
        torch.testing.assert_close(b["advantages"], a["advantages"], rtol=0, atol=0)
        assert b["loss"] == a["loss"]
        for x, y in zip(b["update"], a["update"], strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
