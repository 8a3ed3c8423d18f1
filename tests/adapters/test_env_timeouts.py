"""Rollouts never hang: an env reset or a tool that never answers ends its own episode with ``env_error`` after
``env_timeout``, on every env backend; the worker is replaced, the other episodes and later rollouts go on, and no
thread or process outlives ``engine.close()``."""

from __future__ import annotations

import threading

import psutil
import pytest

from agentgym_r1.adapters import Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.env_backends import MAX_HUNG_THREADS, EnvCall, make_env_backend
from agentgym_r1.envs.tool_env import ToolEnv
from agentgym_r1.error import ConfigError
from tests.adapters.hanging import (
    CLOSE_HANGS,
    STALL,
    TASKS,
    Stalls,
    hangs_in_tool,
    hangs_on_close,
    hangs_on_reset,
    spins_in_a_process,
    stall_env,
)
from tests.adapters.scripted import ScriptedBackend
from tests.liveness import children, new_threads, wait_until


def act(context, turn):
    """Turn 0 calls ``block`` (GSM8K has no such tool: an error observation, and it plays on); turn 1 answers."""
    return ['<tool_call>{"name": "block", "arguments": {}}</tool_call>', "<answer>42</answer>"][min(turn, 1)], True


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["thread", "process", "ray"])
def test_a_hung_reset_or_tool_ends_its_episode_and_nothing_outlives_close(request, chat, name):
    ray = request.getfixturevalue("ray") if name == "ray" else None
    before_threads, before_children = set(threading.enumerate()), children()
    config = RolloutConfig(
        max_turns=3, env_backend=name, env_workers=3, env_timeout=2.0, sampling=SamplingParams(max_new_tokens=40)
    )
    engine = RolloutEngine(ScriptedBackend(chat, act), chat, config)
    prompts = [Prompt(hangs_on_reset), Prompt(hangs_in_tool), Prompt("AgentR1/GSM8K-v0", {"source": "synthetic"}, 1)]
    try:
        for _ in range(2):  # the second rollout plays on the replaced workers
            engine.backend.turn = 0
            episodes = engine.rollout(prompts).episodes
            assert [e.end_reason for e in episodes] == ["env_error", "env_error", "terminated"], [
                e.error for e in episodes
            ]
            assert all("within 2 s (env_timeout)" in e.error for e in episodes[:2]), [e.error for e in episodes]
            assert [len(e.turns) for e in episodes] == [1, 1, 2]  # the reset's placeholder; the step's one turn
            assert episodes[0].placeholder and episodes[2].error is None
        workers = list(engine.envs.workers) if name == "ray" else []
    finally:
        engine.close()
    assert wait_until(lambda: not new_threads(before_threads)), new_threads(before_threads)
    if ray is None:
        assert wait_until(lambda: children() <= before_children), children() - before_children
    else:  # Ray's worker processes are the raylet's to pool; the actors themselves are dead
        assert wait_until(lambda: all(dead(ray, w) for w in workers), 30), "a Ray actor answered after close()"


def dead(ray, actor) -> bool:
    """Whether ``actor`` answers ``RayActorError``. ``ray.kill`` returns once the kill is sent to the GCS
    (``ray/_private/worker.py``, ``kill``: ``core_worker.kill_actor``), so a call made just after it may still run:
    CI once saw one answer. A test of death polls."""
    try:
        ray.get(actor.pid.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return True
    return False


@pytest.mark.timeout(100)  # not stalled: each close would hold a rollout 120 s
@pytest.mark.parametrize("name", ["thread", "process"])
def test_an_env_whose_close_hangs_does_not_hold_the_rollout(chat, name):
    """Factory-made envs are closed when their episode is released: a close that hangs is given up at the limit."""
    CLOSE_HANGS.clear()
    config = RolloutConfig(
        max_turns=2, env_backend=name, env_workers=1, env_timeout=2.0, sampling=SamplingParams(max_new_tokens=40)
    )
    engine = RolloutEngine(ScriptedBackend(chat, lambda c, t: ("<answer>42</answer>", True)), chat, config)
    try:
        for _ in range(2):  # released (and closed) after each rollout; the second plays on
            (episode,) = engine.rollout([Prompt(hangs_on_close)]).episodes
            assert episode.end_reason == "terminated" and episode.success
    finally:
        CLOSE_HANGS.set()
        engine.close()


@pytest.mark.timeout(300)
def test_a_tool_process_inside_a_killed_env_worker_ends_with_it(chat):
    """The env worker is killed at env_timeout while its env waits on a runaway tool in a process of its own (a
    grandchild): that process sees its parent gone and exits, so nothing is left once the engine is closed."""
    seen: set[int] = set()
    stop = threading.Event()

    def watch():  # every descendant that appears while the rollout runs (a grandchild is re-parented when orphaned)
        while not stop.wait(0.1):
            seen.update(p.pid for p in psutil.Process().children(recursive=True))

    before = children()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    config = RolloutConfig(
        max_turns=3, env_backend="process", env_workers=1, env_timeout=3.0, sampling=SamplingParams(max_new_tokens=40)
    )
    engine = RolloutEngine(ScriptedBackend(chat, act), chat, config)
    try:
        (episode,) = engine.rollout([Prompt(spins_in_a_process)]).episodes
        assert episode.end_reason == "env_error" and "env_timeout" in episode.error
    finally:
        engine.close()
        stop.set()
        watcher.join(10)
    spawned = seen - before
    assert len(spawned) >= 2  # the env worker and its tool's process
    assert wait_until(lambda: not any(_alive(pid) for pid in spawned)), [pid for pid in spawned if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(300)
def test_rollouts_of_factory_made_envs_with_a_hung_tool_keep_threads_bounded(chat):
    """Each episode's env is new, and so is its tool: before, each instance could leave 4 threads (32 per 8-episode
    rollout, 193 after 6). Now the tool's kind has 4 in all, and the count drops to nothing once the hang ends and
    the engine is closed."""
    STALL.clear()
    before = set(threading.enumerate())
    config = RolloutConfig(max_turns=4, sampling=SamplingParams(max_new_tokens=40))
    engine = RolloutEngine(
        ScriptedBackend(chat, lambda c, t: ('<tool_call>{"name": "stall", "arguments": {}}</tool_call>', True)),
        chat,
        config,
    )
    try:
        for _ in range(6):
            episodes = engine.rollout([Prompt(stall_env, seed=s) for s in range(8)]).episodes
            assert [e.end_reason for e in episodes] == ["max_turns"] * 8  # the episodes go on: error observations
            assert len(new_threads(before)) <= Stalls.max_abandoned_calls + 1  # and the one env worker
        assert "unavailable" in episodes[-1].messages[-1]["content"]
    finally:
        STALL.set()
        engine.close()
    assert wait_until(lambda: not new_threads(before)), new_threads(before)


@pytest.mark.timeout(120)
def test_the_thread_backend_starts_no_more_calls_past_its_hung_limit():
    """Hung calls that closing their envs does not end (the Event is set only here) are bounded in number."""
    stuck = threading.Event()
    backend = make_env_backend("thread", 4, timeout=0.2)
    before = set(threading.enumerate())
    try:
        replies = backend.run([EnvCall(i, None, _waits_on(stuck)) for i in range(MAX_HUNG_THREADS + 4)])
        assert all("env_timeout" in r.error for r in replies)
        assert len(new_threads(before)) == MAX_HUNG_THREADS + 4 + 4  # the hung calls' threads, and 4 at work
        refused = backend.run([EnvCall(100, None, "AgentR1/GSM8K-v0", {"source": "synthetic"}, 0)])
        assert "still running in threads" in refused[0].error and len(new_threads(before)) == MAX_HUNG_THREADS + 8
    finally:
        stuck.set()
        backend.close()
    assert wait_until(lambda: not new_threads(before))
    backend.release([100])
    (reply,) = backend.run([EnvCall(101, None, "AgentR1/GSM8K-v0", {"source": "synthetic"}, 0)])
    assert reply.error is None and reply.obs  # the hung calls ended: calls start again
    backend.close()


def _waits_on(event):
    def make():
        event.wait(60)
        return ToolEnv(tasks=TASKS)

    return make


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "60", None, True])
def test_env_timeout_must_be_a_finite_positive_number(value):
    with pytest.raises(ConfigError, match=rf"env_timeout must be a finite number of seconds > 0, got {value!r}"):
        RolloutConfig(env_timeout=value)
