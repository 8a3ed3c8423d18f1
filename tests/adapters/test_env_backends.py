"""Env backends: the same episodes on threads, worker processes and Ray actors; a dead worker ends only its
episodes and is replaced; bad backend names and unreachable Ray addresses fail at construction."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from agentgym_r1.adapters import Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.env_backends import EnvCall, make_env_backend
from agentgym_r1.error import ConfigError, EnvBackendError
from tests.adapters.scripted import ScriptedBackend

GSM8K = {"source": "synthetic"}
ALFWORLD = {"source": "generated", "num_games": 3}


def test_an_unreachable_ray_address_is_a_named_error_at_construction(chat):
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    if ray.is_initialized():
        pytest.skip("this process is connected to Ray already: the address would not be used")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EnvBackendError, match=f"127.0.0.1:{port}.*cannot be reached.*ray start --head"):
        RolloutConfig(env_backend="ray", ray_address=f"127.0.0.1:{port}")
    with pytest.raises(EnvBackendError, match="cannot be reached"):
        make_env_backend("ray", 1, f"ray://127.0.0.1:{port}")
    assert not ray.is_initialized()


AUTH_DRIVER = """
import socket, sys
from agentgym_r1.adapters.env_backends import make_env_backend
from agentgym_r1.error import EnvBackendError
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()  # the address takes a TCP connection; Ray then asks for its token
try:
    make_env_backend("ray", 1, "127.0.0.1:%d" % listener.getsockname()[1])
except EnvBackendError as e:
    print("EnvBackendError:", e)
"""


def test_a_ray_cluster_asking_for_a_token_this_process_lacks_is_a_named_error(tmp_path):
    """Ray 2.60's token authentication (``RAY_AUTH_MODE=token``) with no token: ``ray.init`` raises its own
    ``AuthenticationError``, which reached the caller raw; it is an :class:`EnvBackendError` that says where the
    token goes. A process of its own: the mode and Ray's state are per process."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(tmp_path), RAY_AUTH_MODE="token")
    run = subprocess.run([sys.executable, "-c", AUTH_DRIVER], env=env, capture_output=True, text=True, timeout=120)
    assert "EnvBackendError:" in run.stdout, run.stdout + run.stderr[-2000:]
    assert "token authentication" in run.stdout and "RAY_AUTH_TOKEN" in run.stdout


def backends(request):
    """The backends to compare: ray's only when the extra is installed."""
    names = ["thread", "process"]
    try:
        request.getfixturevalue("ray")
        names.append("ray")
    except pytest.skip.Exception:
        pass
    return names


def replies_on(name, calls_by_round, workers=2):
    backend = make_env_backend(name, workers)
    try:
        out = [backend.run(calls) for calls in calls_by_round]
        backend.release([c.slot for c in calls_by_round[0]])
        return out
    finally:
        backend.close()


def test_replies_are_identical_on_every_backend(request):
    pytest.importorskip("textworld")
    resets = [
        EnvCall(0, None, "AgentR1/GSM8K-v0", GSM8K, 5),
        EnvCall(1, None, "AgentR1/GSM8K-v0", GSM8K, 6),
        EnvCall(2, None, "AgentR1/ALFWorld-v1", ALFWORLD, 1),
        EnvCall(3, None, "AgentR1/ALFWorld-v1", ALFWORLD, 2),
    ]
    rounds = [
        resets,
        [
            EnvCall(0, '<tool_call>{"name": "calculator", "arguments": {"expression": "2 * 21"}}</tool_call>'),
            EnvCall(1, "<answer>42</answer>"),
            EnvCall(2, "look"),
            EnvCall(3, "go to fridge 1"),
        ],
        [
            EnvCall(0, "<answer>42</answer>"),
            EnvCall(2, "inventory"),
            EnvCall(3, "open fridge 1"),
            EnvCall(1, "<answer>7</answer>"),
        ],
    ]  # slot 1 ended: its step is the env's own error
    runs = {name: replies_on(name, rounds) for name in backends(request)}
    reference = runs.pop("thread")
    assert all(r.error is None for r in reference[0]) and reference[1][2].info["spans"]
    for name, replies in runs.items():
        assert replies == reference, name  # observations, rewards, info (spans included) and transcripts


def test_rollouts_are_identical_on_every_backend(request, chat):
    def act(context, turn):
        return [
            '<tool_call>{"name": "calculator", "arguments": {"expression": "3 * 4"}}</tool_call>',
            "<answer>12</answer>",
        ][turn % 2], turn % 2 == 1

    prompts = [Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in (1, 2, 3)]
    batches = {}
    for name in backends(request):
        config = RolloutConfig(
            samples_per_prompt=2,
            max_turns=3,
            seed=7,
            env_backend=name,
            env_workers=2,
            sampling=SamplingParams(max_new_tokens=40),
        )
        engine = RolloutEngine(ScriptedBackend(chat, act), chat, config)
        try:
            batches[name] = [engine.rollout(prompts), engine.rollout(prompts[:1])]  # the second reuses pooled envs
        finally:
            engine.close()
    reference = batches.pop("thread")
    for name, played in batches.items():
        for a, b in zip(reference, played, strict=True):
            assert [(e.seed, e.task_id, e.messages, e.end_reason, e.reward, e.success) for e in a.episodes] == [
                (e.seed, e.task_id, e.messages, e.end_reason, e.reward, e.success) for e in b.episodes
            ], name
            assert [(s.prompt_ids, s.completion_ids, s.env_mask) for s in a.samples] == [
                (s.prompt_ids, s.completion_ids, s.env_mask) for s in b.samples
            ], name
            assert b.timings["env"] > 0


@pytest.mark.parametrize("name", ["process", "ray"])
def test_a_worker_that_dies_ends_only_its_episodes_and_is_replaced(request, chat, name):
    if name == "ray":
        request.getfixturevalue("ray")
    config = RolloutConfig(max_turns=3, env_backend=name, env_workers=2, sampling=SamplingParams(max_new_tokens=40))
    engine = RolloutEngine(ScriptedBackend(chat, lambda c, t: _kill_at(engine, t)), chat, config)
    try:
        batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in range(4)])
        # Resets went to the least busy worker: episodes 0 and 2 on worker 0, which was killed before turn 1's step.
        ends = [e.end_reason for e in batch.episodes]
        assert ends == ["env_error", "max_turns", "env_error", "max_turns"], [e.error for e in batch.episodes]
        assert all("died" in batch.episodes[i].error and len(batch.episodes[i].turns) == 2 for i in (0, 2))
        new = engine.envs.pids()
        assert len(new) == 2 and new[0] != engine.killed and new[1] != engine.killed
        again = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in range(4)])
        assert [e.end_reason for e in again.episodes] == ["max_turns"] * 4
        engine.close()  # a closed engine starts new workers for its next rollout
        (last,) = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=0)]).episodes
        assert last.error is None and last.end_reason in ("max_turns", "terminated")
    finally:
        engine.close()


def _kill_at(engine, turn):
    """The scripted model's turn; at turn 1 (after the first step), worker 0 is killed with SIGKILL."""
    if turn == 1 and not hasattr(engine, "killed"):
        engine.killed = engine.envs.pids()[0]
        os.kill(engine.killed, signal.SIGKILL)
    return "<answer>1</answer>" if turn > 5 else "just thinking", False


def test_bad_backends_are_named_errors_at_construction(chat):
    with pytest.raises(ConfigError, match=r"env_backend 'fork'.*thread"):
        RolloutConfig(env_backend="fork")
    with pytest.raises(ConfigError, match="env_workers"):
        RolloutConfig(env_workers=-1)
    with pytest.raises(ConfigError, match="unknown env_backend"):
        make_env_backend("fork")
    engine = RolloutEngine(ScriptedBackend(chat, None), chat, RolloutConfig(env_backend="process"))
    try:
        with pytest.raises(ConfigError, match=r"cannot be pickled.*module level"):
            engine.rollout([Prompt(lambda: None)])
        with pytest.raises(ConfigError, match=r"env_kwargs.*cannot be pickled.*module level"):  # options too
            engine.rollout([Prompt("AgentR1/ToolEnv-v0", {"tools": [lambda text: text]})])
    finally:
        engine.close()
