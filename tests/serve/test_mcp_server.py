"""``agentgym-r1 serve mcp``: HotpotQA's ``search`` called by the ``mcp`` SDK's client, over stdio and streamable
HTTP on 127.0.0.1, from a real server process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason='needs the mcp extra: pip install "agentgym-r1[mcp]"')

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agentgym_r1.cli import main
from agentgym_r1.envs.hotpotqa.env import HotpotQAEnv
from tests.serve.conftest import free_port, wait_until

ROOT = str(Path(__file__).resolve().parents[2])
ENV = ["AgentR1/HotpotQA-v0", "kb_size=200"]
CLI = [sys.executable, "-m", "agentgym_r1.cli", "serve", "mcp", *ENV]


@pytest.fixture(scope="module")
def title() -> str:
    """A title the served env's corpus holds: the first supporting passage of its first question."""
    env = HotpotQAEnv(kb_size=200)
    try:
        env.reset(seed=0, options={"index": 0})
        return env.task.meta["supporting_titles"][0]
    finally:
        env.close()


async def use(transport, title: str) -> tuple[list, object, object, object]:
    async with transport as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        found = await session.call_tool("search", {"query": title})
        empty = await session.call_tool("search", {"query": ""})
        unknown = await session.call_tool("lookup", {"key": "x"})
        return listed.tools, found, empty, unknown


def check(tools, found, empty, unknown, title: str) -> None:
    assert [t.name for t in tools] == ["search"]
    assert tools[0].input_schema["required"] == ["query"]
    assert not found.is_error and f"Doc 1 (Title: {title})" in found.content[0].text
    assert empty.is_error and "the search query is empty" in empty.content[0].text
    assert unknown.is_error and "unknown tool 'lookup'" in unknown.content[0].text


def test_an_mcp_client_calls_hotpotqa_search_over_stdio(title):
    # the SDK passes only a few variables to a stdio server (mcp.client.stdio.get_default_environment): the checkout
    # goes by PYTHONPATH
    params = StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], "--transport", "stdio"], cwd=ROOT, env={"PYTHONPATH": ROOT}
    )
    with open(os.devnull, "w") as errlog:
        check(*anyio.run(use, stdio_client(params, errlog=errlog), title), title)


def test_an_mcp_client_calls_hotpotqa_search_over_streamable_http(title):
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        import socket

        assert proc.poll() is None, "the server exited"
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, 120, "agentgym-r1 serve mcp listening")
        check(*anyio.run(use, streamable_http_client(f"http://127.0.0.1:{port}/mcp"), title), title)
    finally:
        proc.kill()
        proc.wait(10)


def test_an_env_without_tools_is_refused(capsys):
    assert main(["serve", "mcp", "AgentR1/ALFWorld-v1", "source=generated", "num_games=1", "--port", "0"]) == 2
    assert "has no tools to serve over MCP" in capsys.readouterr().err
