"""Envs that hang, for the env-timeout tests: factories at module level under ``tests.adapters`` (worker processes
and Ray actors import them by that name)."""

from __future__ import annotations

import threading

from agentgym_r1.core.tools import BaseTool, ToolResult
from agentgym_r1.envs.tool_env import ToolEnv

TASKS = [{"prompt": "What is 6 times 7?", "answer": "42"}]


class Blocks(BaseTool):
    """A tool with no timeout that waits for its connection (an Event) to answer; closing it ends the wait, as
    closing a socket ends a read on it."""

    name, description = "block", "wait for an answer"
    parameters = {"type": "object", "properties": {}}
    timeout = None

    def __init__(self) -> None:
        self.unblock = threading.Event()

    def __call__(self) -> ToolResult:
        self.unblock.wait(60)
        return ToolResult(True, "late")

    def close(self) -> None:
        self.unblock.set()


class HangsOnReset(ToolEnv):
    """A ToolEnv whose reset waits (for a task server, say) until the env is closed."""

    def __init__(self) -> None:
        super().__init__(tasks=TASKS)
        self.unblock = threading.Event()

    def _begin(self, options):
        self.unblock.wait(60)
        return super()._begin(options)

    def close(self) -> None:
        self.unblock.set()
        super().close()


def hangs_on_reset() -> ToolEnv:
    return HangsOnReset()


def hangs_in_tool() -> ToolEnv:
    return ToolEnv(tools=[Blocks()], tasks=TASKS)


STALL = threading.Event()


class Stalls(BaseTool):
    """Blocks until the module's STALL event is set (a hung connection that closing the env does not end)."""

    name, description = "stall", "stall"
    parameters = {"type": "object", "properties": {}}
    timeout = 0.01

    def __call__(self) -> ToolResult:
        STALL.wait(60)
        return ToolResult(True, "late")


def stall_env() -> ToolEnv:
    return ToolEnv(tools=[Stalls()], tasks=[{"prompt": "wait", "answer": "a"}])


def spin_forever() -> str:
    """Loop forever (a runaway tool: nothing a thread could wait on)."""
    while True:
        pass


def spins_in_a_process() -> ToolEnv:
    """A ToolEnv whose one tool runs in its own process and never returns (no tool timeout: the env's limit holds)."""
    from agentgym_r1.core.tools import tool

    return ToolEnv(tools=[tool(spin_forever, name="block", timeout=None)], tasks=TASKS, tool_isolation="process")


CLOSE_HANGS = threading.Event()  # set by a test to let every HangsOnClose close


class HangsOnClose(ToolEnv):
    """A ToolEnv whose close waits for a server that never answers (until the test sets CLOSE_HANGS)."""

    def __init__(self) -> None:
        super().__init__(tasks=TASKS)

    def close(self) -> None:
        CLOSE_HANGS.wait(120)
        super().close()


def hangs_on_close() -> ToolEnv:
    return HangsOnClose()
