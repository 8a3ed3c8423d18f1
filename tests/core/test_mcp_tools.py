"""ToolEnv(mcp_servers=...): a real MCP server (tests/core/mcp_server.py, the mcp SDK's MCPServer) over stdio and over
streamable HTTP on 127.0.0.1; its errors, crashes and hangs are error observations, and nothing outlives close."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason='needs the mcp extra: pip install "agentgym-r1[mcp]"')

from agentgym_r1.envs.gsm8k.env import GSM8KEnv
from agentgym_r1.envs.tool_env import ToolEnv
from agentgym_r1.error import ConfigError, McpServerError, ToolNameClashError
from tests.serve.conftest import free_port, wait_until

SERVER = str(Path(__file__).with_name("mcp_server.py"))
STDIO = [sys.executable, SERVER]
TASKS = [{"prompt": "What is 2 + 3?", "answer": "5"}]


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key
    """
    return f"value of {key}"


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def step(env, name: str, **arguments):
    obs, reward, terminated, truncated, info = env.step(call(name, **arguments))
    assert not terminated and not truncated  # the episode goes on, whatever the server did
    info["ok"] = reward == 0.0  # the envs here give failed_call_penalty=-1 to a call that failed, 0 to one that worked
    return obs, info


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (exited, not yet reaped) is not running
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    return True


def mcp_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agentgym-mcp"]


def server_pid(env) -> int:
    obs, info = step(env, "pid")
    assert info["ok"], obs
    return int(obs.split("<tool_response>")[1].split("</tool_response>")[0].strip())


@pytest.fixture
def env():
    env = ToolEnv([lookup], TASKS, mcp_servers=[STDIO], mcp_timeout=10, failed_call_penalty=-1.0)
    env.reset(seed=0)
    yield env
    env.close()


def test_the_servers_tools_are_listed_with_their_schemas_beside_python_tools(env):
    assert sorted(env.tools) == ["add", "crash", "fail", "hang", "lookup", "pid"]
    schemas = {s["function"]["name"]: s["function"] for s in env.tool_schemas()}
    assert schemas["add"]["description"] == "Add two integers."
    assert schemas["add"]["parameters"]["properties"]["a"]["type"] == "integer"
    assert schemas["add"]["parameters"]["required"] == ["a", "b"]
    assert '"name": "add"' in env.unwrapped.system_prompt and '"name": "lookup"' in env.unwrapped.system_prompt


def test_a_call_goes_to_the_server_and_a_python_tool_still_works(env):
    obs, info = step(env, "add", a=2, b=3)
    assert info["ok"] and "<tool_response>\n5\n</tool_response>" in obs
    obs, info = step(env, "lookup", key="k")
    assert info["ok"] and "value of k" in obs
    obs, info = step(env, "add", a=2, b="three")  # validated against the server's schema before it is sent
    assert not info["valid"] and "invalid arguments for add" in obs


def test_a_server_error_is_an_error_observation(env):
    obs, info = step(env, "fail", message="no such row")
    assert not info["ok"] and "Error" in obs and "fail" in obs
    obs, info = step(env, "add", a=1, b=1)
    assert info["ok"] and "2" in obs


def test_a_crashed_server_is_an_error_observation_and_is_restarted_on_the_next_call(env):
    first = server_pid(env)
    obs, info = step(env, "crash")
    assert not info["ok"] and "restarted on the next call" in obs
    second = server_pid(env)
    assert second != first and not alive(first)


def test_a_hung_server_is_an_error_observation_and_is_stopped_and_restarted():
    env = ToolEnv(tasks=TASKS, mcp_servers=[STDIO], mcp_timeout=5, failed_call_penalty=-1.0)
    try:
        env.reset(seed=0)
        first = server_pid(env)
        obs, info = step(env, "hang", seconds=600)
        assert not info["ok"] and "did not answer within 5 s" in obs
        assert not alive(first)  # stopped, not abandoned
        assert server_pid(env) != first
    finally:
        env.close()


def test_nothing_outlives_close():
    before = len(mcp_threads())
    env = ToolEnv(tasks=TASKS, mcp_servers=[STDIO], mcp_timeout=10, failed_call_penalty=-1.0)
    env.reset(seed=0)
    pid = server_pid(env)
    assert len(mcp_threads()) == before + 1 and alive(pid)
    env.close()
    assert len(mcp_threads()) == before and not alive(pid)


def test_an_env_never_closed_stops_its_servers_when_it_is_collected():
    before = len(mcp_threads())
    env = ToolEnv(tasks=TASKS, mcp_servers=[STDIO], mcp_timeout=10, failed_call_penalty=-1.0)
    env.reset(seed=0)
    pid = server_pid(env)
    del env
    gc.collect()
    assert len(mcp_threads()) == before and not alive(pid)


@pytest.fixture
def refused():
    """Checks that a refused construction left no loop thread behind."""
    before = len(mcp_threads())
    yield
    assert len(mcp_threads()) == before


def test_a_server_that_cannot_start_fails_construction_with_its_stderr(refused):
    with pytest.raises(McpServerError, match="cannot open the database /nonexistent/db"):
        ToolEnv(tasks=TASKS, mcp_servers=[[sys.executable, SERVER, "broken"]], mcp_timeout=10)
    with pytest.raises(McpServerError, match="No such file or directory"):
        ToolEnv(tasks=TASKS, mcp_servers=[["/nonexistent/mcp-server"]], mcp_timeout=10)


def test_a_tool_name_clash_with_a_python_tool_is_refused_naming_both(refused):
    with pytest.raises(ToolNameClashError, match=r"'lookup'.*mcp_server\.py clash.*the Python tool lookup"):
        ToolEnv([lookup], TASKS, mcp_servers=[[sys.executable, SERVER, "clash"]], mcp_timeout=10)


def test_a_tool_name_clash_between_two_servers_is_refused_naming_both(refused):
    with pytest.raises(ToolNameClashError, match=r"'add'.*mcp_server\.py clash.*one of MCP server .*mcp_server\.py'"):
        ToolEnv(tasks=TASKS, mcp_servers=[STDIO, [sys.executable, SERVER, "clash"]], mcp_timeout=10)


@pytest.mark.parametrize("servers", [["python server.py"], [[]], [["python", 3]], "http://x/mcp", ["ftp://x"]])
def test_a_server_that_is_neither_a_command_nor_a_url_is_refused_before_any_work(servers, refused):
    with pytest.raises(ConfigError, match="mcp_servers"):
        ToolEnv(tasks=TASKS, mcp_servers=servers)


def test_every_env_built_on_tool_env_takes_mcp_servers():
    env = GSM8KEnv(mcp_servers=[STDIO], mcp_timeout=10, failed_call_penalty=-1.0)
    try:
        env.reset(seed=0)
        assert {"calculator", "add"} <= set(env.tools)
        obs, info = step(env, "add", a=20, b=22)
        assert info["ok"] and "42" in obs
    finally:
        env.close()


@pytest.fixture
def http_server():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def listening() -> bool:
        import socket

        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, 60, "the MCP test server listening")
        yield proc, f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


def test_streamable_http_calls_errors_hangs_and_a_server_that_went_away(http_server):
    proc, url = http_server
    env = ToolEnv(tasks=TASKS, mcp_servers=[url], mcp_timeout=5, failed_call_penalty=-1.0)
    try:
        env.reset(seed=0)
        obs, info = step(env, "add", a=2, b=3)
        assert info["ok"] and "5" in obs
        obs, info = step(env, "fail", message="x")
        assert not info["ok"] and "Error" in obs
        obs, info = step(env, "hang", seconds=30)
        assert not info["ok"] and "did not answer within 5 s" in obs
        obs, info = step(env, "add", a=1, b=2)  # a new session on the same server
        assert info["ok"] and "3" in obs
        proc.kill()
        proc.wait(10)
        obs, info = step(env, "add", a=1, b=2)
        assert not info["ok"] and "Error: add" in obs
        obs, info = step(env, "add", a=1, b=2)
        assert not info["ok"] and "unavailable" in obs and "could not be reached" in obs
    finally:
        env.close()
    assert not mcp_threads()


def test_import_agentgym_r1_does_not_import_mcp():
    code = "import sys, agentgym_r1, agentgym_r1.envs.tool_env; print('mcp' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.stdout.strip() == "False"
