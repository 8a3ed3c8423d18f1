"""``AgentR1/PythonMath-v0``: GSM8K solved with a sandboxed ``python`` tool instead of the calculator."""

from __future__ import annotations

import json
from typing import Any

from agentgym_r1.core.env import init_options, reject_unknown
from agentgym_r1.core.sandbox import Limits, PythonTool, Sandbox
from agentgym_r1.core.tasks import Task
from agentgym_r1.core.tools import BaseTool
from agentgym_r1.envs.gsm8k.env import GSM8KEnv

SYSTEM_PROMPT = (
    "You are a careful math solver. Work out the answer step by step, write short Python programs with "
    "the python tool for the arithmetic (print what you need), and give the final answer as a number."
)


def expert_program(task: Task) -> str:
    """A program that prints each value of ``task``'s reference solution, one a line."""
    return "\n".join(f"print({expr})" for expr in task.meta.get("expert", ())) or "print()"


def expert_actions(task: Task) -> list[str]:
    """The expert episode: one python call printing the reference values, then the gold answer."""
    call = json.dumps({"name": "python", "arguments": {"code": expert_program(task)}})
    return [f"<tool_call>{call}</tool_call>", f"<answer>{task.answer}</answer>"]


class PythonMathEnv(GSM8KEnv):
    """Grade-school math word problems solved with a sandboxed ``python`` tool.

    **Description.** One GSM8K problem per episode, as in ``AgentR1/GSM8K-v0``, with the ``python`` tool (argument
    ``code``: a program; the answer is what it printed) in place of the calculator. The code runs in a sandbox
    (:mod:`agentgym_r1.core.sandbox`): bubblewrap with no network, a read-only root, a fresh work directory and
    rlimits. Where bubblewrap cannot run, the env refuses to start
    (:class:`~agentgym_r1.error.SandboxUnavailableError`) unless ``sandbox="rlimits"`` (a plain subprocess with
    rlimits: not isolation). ``limits``: a :class:`~agentgym_r1.core.sandbox.Limits` or a dict of its fields.

    **Observation.** The system prompt with the tool schema, then the question; then what the programs printed, and
    how a program ended when it failed or hit a limit (an error observation; the episode goes on).

    **Action.** Hermes tool calls (default), or the other parsers of :class:`~agentgym_r1.envs.gsm8k.GSM8KEnv`; the
    answer as ``<answer>n</answer>``, ``#### n`` or ``\\boxed{n}``.

    **Reward.** As GSM8K: ``outcome`` 1 when the answer equals the gold number, else 0; process and format parts as
    in :class:`ToolEnv`. ``metrics``: ``accuracy``.

    **Episode end.** Terminated on an answer; truncated at the turn limit (6).

    **Data sources.** As GSM8K: ``"synthetic"`` at every ``difficulty``, an official JSONL file, or ``"hf"``.

    **Version history.** v0: first release.
    """

    def __init__(
        self,
        source: str = "synthetic",
        split: str = "test",
        *,
        sandbox: Sandbox = "bwrap",
        limits: Limits | dict[str, Any] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> None:
        known = init_options(GSM8KEnv)
        reject_unknown(
            type(self).__name__,
            {k: v for k, v in kwargs.items() if k not in known},
            {*known, *init_options(PythonMathEnv)},
        )
        limits = Limits(**limits) if isinstance(limits, dict) else limits
        self.python = PythonTool(sandbox, limits)
        super().__init__(
            source, split, system_prompt=SYSTEM_PROMPT if system_prompt is None else system_prompt, **kwargs
        )

    def make_tools(self) -> list[BaseTool]:
        return [self.python]
