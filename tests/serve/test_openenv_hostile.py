"""The env server under hostile input (#41): a lone surrogate in a finishing action reaches the client with the
episode's result; bad reset arguments are 422s and the live episode goes on; frames openenv's handler cannot read
(binary, not JSON, not an object) are answered and the session goes on; a port out of range is an argparse error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from tests.serve.conftest import served, skip_without_serve

skip_without_serve()

import httpx  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from tests.conftest import make_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GSM8K = ("AgentR1/GSM8K-v0", {"source": "synthetic"})
# A model's JSON escape: the env reads a lone surrogate out of it; the last two also hold one in the action itself.
SURROGATE_ACTIONS = [
    r'<tool_call>{"name": "calculator", "arguments": {"expression": "\ud800"}}</tool_call>',
    r'<tool_call>{"name": "answer", "arguments": {"answer": "\udfff"}}</tool_call>',
    r"<answer>\ud800</answer>",
    "<answer>\ud800</answer>",
    "<tool_call>\ud800</tool_call>",
]


@pytest.mark.parametrize("action", SURROGATE_ACTIONS, ids=range(len(SURROGATE_ACTIONS)))
def test_a_lone_surrogate_reaches_the_client_with_the_result(action):
    local = make_env("AgentR1/GSM8K-v0")
    local.reset(seed=1)
    _, reward, terminated, truncated, _ = local.step(action)
    with served(*GSM8K) as url:
        env = gym.make("AgentR1/Remote-v0", url=url)
        env.reset(seed=1)
        obs, remote_reward, remote_terminated, remote_truncated, info = env.step(action)
        grade = env.unwrapped.grade
        json.dumps([obs, info["action"], env.unwrapped.transcript.text]).encode("utf-8")  # writable as UTF-8
        env.close()
    assert (remote_reward, remote_terminated, remote_truncated) == (reward, terminated, truncated)
    assert (grade.score, grade.success) == (local.unwrapped.grade.score, local.unwrapped.grade.success)


def test_bad_reset_arguments_are_422s_and_the_episode_goes_on():
    with served(*GSM8K) as url, GenericEnvClient(base_url=url).sync() as client:
        local = make_env("AgentR1/GSM8K-v0")
        local.reset(seed=1)
        client.reset(seed=1)
        for bad in (
            {"options": [1]},
            {"options": "index=3"},
            {"options": 5},
            {"seed": "abc"},
            {"seed": -1},
            {"seed": 1.5},
            {"seed": True},
            {"seed": [1]},
            {"episode_id": 5},
            {"episode_id": "e" * 300},
        ):
            with pytest.raises(RuntimeError, match=r"ConfigError: (options|seed|episode_id) must be"):
                client.reset(**bad)
        step = client.step({"text": "<answer>1</answer>"})  # the episode reset before the refusals goes on
        assert step.observation["text"] == local.step("<answer>1</answer>")[0]
        # json.dumps writes NaN, infinities and lone surrogates, which FastAPI's own 422 echoed back and failed on (500)
        bodies = (
            {"options": [1]},
            {"options": "x"},
            {"seed": "abc"},
            {"seed": 1, "episode_id": 5},
            {"seed": float("nan")},
            {"seed": float("-inf")},
            {"episode_id": "\ud800"},
            {"seed": "\udfff"},
        )
        http = [
            httpx.post(
                f"{url}/reset", content=json.dumps(body), headers={"content-type": "application/json"}, timeout=30
            )
            for body in bodies
        ]
    assert [r.status_code for r in http] == [422] * len(bodies), [r.text for r in http]
    assert "options must be a JSON object" in http[0].json()["detail"]


def test_frames_the_handler_cannot_read_are_answered_and_the_session_goes_on():
    frames = [
        b"\x00\x01binary",
        "[1, 2]",
        "5",
        '"reset"',
        "null",
        "1" * 5000,
        "[" * 100_000,
        '{"type": "reset", "data": {"seed": ' + "1" * 5000 + "}}",
        "{not json",
        '{"type": ["reset"]}',
        '{"type": "reset", "data": [1]}',
        '{"type": "reset", "data": {"seed": "x"}}',
    ]
    with served(*GSM8K) as url, connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:
        codes = []
        for frame in frames:
            ws.send(frame)
            answer = json.loads(ws.recv(timeout=30))
            assert answer["type"] == "error", answer
            codes.append(answer["data"]["code"])
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        reset = json.loads(ws.recv(timeout=30))
    assert (
        reset["type"] == "observation" and reset["data"]["observation"]["text"] == make_env(GSM8K[0]).reset(seed=1)[0]
    )
    assert codes[:3] == ["INVALID_JSON", "VALIDATION_ERROR", "VALIDATION_ERROR"], codes


@pytest.mark.parametrize("server", [["env", "AgentR1/GSM8K-v0"], ["retriever", "--index", "nowhere"]])
@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_an_argparse_error(server, port):
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym_r1.cli", "serve", *server, "--port", port],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "argument --port: must be a port number from 0 to 65535" in proc.stderr
