"""Tools in worker processes (``isolation="process"``): a runaway call is killed at its timeout, the episode goes on,
the next call runs on a fresh process, and no process outlives the env's ``close``. Tools in threads: abandoned calls
are bounded per kind of tool and in all, not per instance."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from agentgym_r1.core.tools import (
    MAX_ABANDONED_THREADS,
    BaseTool,
    ToolResult,
    abandoned_calls,
    abandoned_threads,
    check_tools,
    close_tool,
    run_tool,
    tool,
)
from agentgym_r1.core.workers import ProcessWorker, ThreadLanes
from agentgym_r1.envs.tool_env import ToolEnv
from agentgym_r1.error import ConfigError, ToolNotPicklableError, WorkerDied, WorkerTimeout
from tests.adapters.hanging import STALL, Stalls, stall_env
from tests.liveness import children, new_threads, wait_until


def spin(n: int) -> str:
    """Double n; for a negative n, loop forever (a runaway tool: no sleep, no I/O, nothing a thread could wait on).

    Args:
        n: the number
    """
    while n < 0:
        pass
    return str(2 * n)


def call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.mark.timeout(120)
def test_a_runaway_tool_in_a_process_is_killed_and_the_episode_goes_on():
    before_children, before_threads = children(), set(threading.enumerate())
    env = ToolEnv(
        tools=[tool(spin, timeout=1.0)], tasks=[{"prompt": "double 3", "answer": "6"}], tool_isolation="process"
    )
    try:
        env.reset(seed=0)
        obs, _, terminated, truncated, info = env.step(call("spin", n=2))
        assert "4" in obs and not terminated
        first = env.tools["spin"].__dict__["_process"].worker.pid
        obs, _, terminated, truncated, info = env.step(call("spin", n=-1))  # would run forever in a thread
        assert "did not answer within 1 s; it was stopped" in obs and not terminated and not truncated
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
        obs, _, terminated, _, _ = env.step(call("spin", n=3))  # a fresh process answers
        assert "6" in obs and env.tools["spin"].__dict__["_process"].worker.pid not in (None, first)
        assert env.step("<answer>6</answer>")[2]
    finally:
        env.close()
    assert wait_until(lambda: children() <= before_children), children() - before_children
    assert abandoned_calls(env.tools["spin"]) == 0  # nothing was left running in a thread
    assert wait_until(lambda: not new_threads(before_threads))


class Counter(BaseTool):
    """A tool with state kept in its process between calls."""

    name, description = "count", "count calls"
    parameters = {"type": "object", "properties": {}}
    isolation = "process"
    timeout = 10.0

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> ToolResult:
        self.calls += 1
        return ToolResult(True, f"{self.calls} calls", reward=0.5)


@pytest.mark.timeout(120)
def test_a_process_tool_keeps_its_state_and_results_are_coerced():
    counter = Counter()
    try:
        assert [run_tool(counter, {}) for _ in range(3)][-1] == ToolResult(True, "3 calls", 0.5)
        assert counter.calls == 0  # the calls ran in the worker process, on its copy
    finally:
        close_tool(counter)
    assert counter.__dict__["_process"].worker.pid is None


def test_a_tool_that_cannot_be_pickled_is_a_named_error_at_construction():
    lock = threading.Lock()

    def locked(x: int) -> str:
        """Use a lock."""
        with lock:
            return str(x)

    with pytest.raises(ToolNotPicklableError, match=r"'locked'.*isolation='process'.*cannot be pickled.*module level"):
        ToolEnv(tools=[locked], tasks=[{"prompt": "p", "answer": "a"}], tool_isolation="process")
    with pytest.raises(ConfigError, match=r"isolation must be one of \['thread', 'process'\], got 'fork'"):
        check_tools([tool(spin, isolation="fork")])
    check_tools([tool(locked)])  # threads need no pickling


# -- the workers themselves ----------------------------------------------------------------------------------------
def slow_echo(value: object, seconds: float) -> object:
    time.sleep(seconds)
    return value


@pytest.mark.timeout(120)
def test_a_process_worker_is_killed_past_its_limit_and_restarts_on_the_next_call():
    worker = ProcessWorker(name="test worker")
    try:
        assert worker.call(slow_echo, "a", 0.0, timeout=30) == "a"
        pid = worker.pid
        with pytest.raises(WorkerTimeout, match=r"test worker did not answer within 0\.5 s"):
            worker.call(slow_echo, "b", 60.0, timeout=0.5)
        assert worker.pid is None and wait_until(lambda: not psutil.pid_exists(pid))
        assert worker.call(slow_echo, "c", 0.0, timeout=30) == "c" and worker.pid != pid
        psutil.Process(worker.pid).kill()  # killed from outside: the wait ends at once with WorkerDied
        with pytest.raises(WorkerDied, match="exited"):
            worker.call(slow_echo, "d", 0.0, timeout=30)
        with pytest.raises(ZeroDivisionError):  # a call's own error comes back as itself
            worker.call(divmod, 1, 0, timeout=30)
    finally:
        worker.close()


def test_thread_lanes_hand_back_a_call_past_its_limit_and_end_at_close():
    release = threading.Event()

    def work(x: int) -> int:
        if x == 1:
            release.wait(30)
        if x == 4:
            raise ValueError("four")
        return x * 10

    before = set(threading.enumerate())
    lanes = ThreadLanes(work, workers=2, timeout=0.5)
    out = lanes.run([0, 1, 2, 3, 4])
    try:
        assert [r for r, _ in out[:4]] == [0, None, 20, 30] and isinstance(out[4][0], ValueError)
        hung = out[1][1]
        assert hung is not None and hung.is_alive() and all(t is None for i, (_, t) in enumerate(out) if i != 1)
        assert [r for r, _ in lanes.run([5, 6, 7])] == [50, 60, 70]  # two lanes at work: a new one took its place
        assert len(new_threads(before)) == 3
    finally:
        release.set()
    lanes.close()
    assert wait_until(lambda: not new_threads(before))


# -- abandoned threads, bounded per kind of tool and in all ----------------------------------------------------------
@pytest.mark.timeout(120)
def test_abandoned_threads_are_bounded_across_new_instances_of_a_tool():
    """Every env a factory makes has a new instance of the tool: before, each instance had its own 4 threads."""
    STALL.clear()
    before = set(threading.enumerate())
    try:
        for episode in range(12):
            env = stall_env()
            env.reset(seed=episode)
            for _ in range(4):
                env.step(call("stall"))
            env.close()
            assert len(new_threads(before)) <= Stalls.max_abandoned_calls
        assert abandoned_calls(Stalls()) == Stalls.max_abandoned_calls and abandoned_threads() <= MAX_ABANDONED_THREADS
    finally:
        STALL.set()
    assert wait_until(lambda: not new_threads(before))
    assert abandoned_calls(Stalls()) == 0
