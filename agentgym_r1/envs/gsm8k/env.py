"""``AgentR1/GSM8K-v0``: grade-school math with a calculator tool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym_r1.core.env import EnvMessage, Grade, finite_option, init_options, reject_unknown
from agentgym_r1.core.parsers import ActionParser, ToolCall
from agentgym_r1.core.rewards import numeric_equal
from agentgym_r1.core.tasks import Task
from agentgym_r1.core.tools import BaseTool, ToolResult
from agentgym_r1.envs.gsm8k.calculator import Calculator, CalculatorError, evaluate, format_number
from agentgym_r1.envs.gsm8k.data import load_source, synthetic_knobs
from agentgym_r1.envs.tool_env import ToolEnv
from agentgym_r1.error import ConfigError

SYSTEM_PROMPT = (
    "You are a careful math solver. Work out the answer step by step, use the calculator for "
    "arithmetic, and give the final answer as a number."
)


def _value(expression: str) -> str | None:
    """The calculator's answer to a reference expression, as the tool would print it (None if it has none)."""
    try:
        return format_number(evaluate(expression))
    except CalculatorError:
        return None


def numeric_reward(prediction: str, task: Task) -> Grade:
    correct = float(numeric_equal(prediction, str(task.answer)))
    return Grade(correct, correct == 1.0, {"accuracy": correct})


class GSM8KEnv(ToolEnv):
    """Grade-school math word problems solved with a ``calculator`` tool.

    **Description.** One GSM8K problem per episode. The agent may call ``calculator`` (argument ``expression``:
    numbers, ``+ - * / // % **``, parentheses; evaluated by an AST walker, never ``eval``) and then answers.

    **Observation.** The system prompt with the tool schema, then the question; then the calculator's results.

    **Action.** Hermes tool calls (default), tags (``<calculator>2+3</calculator>``) or commands
    (``calculator[2+3]``); the answer as ``<answer>n</answer>``, ``#### n`` or ``\\boxed{n}``.

    **Reward.** ``outcome`` 1 when the answer equals the gold number (numeric equivalence), else 0; process and
    format parts as in :class:`ToolEnv`, plus ``step_value_reward`` (default 0) in ``process`` for each calculator
    result that equals a value of the reference solution (the ``<<expr=value>>`` annotations of GSM8K, the expert
    trace of the synthetic source), each reference step credited at most once per episode. ``metrics``: ``accuracy``.

    **Episode end.** Terminated on an answer; truncated at the turn limit (6).

    **Data sources.** ``source="synthetic"`` (default; generated multi-step word problems with expert calculator
    traces, seeded by ``seed``, unlimited; ``difficulty`` ``"easy"`` (default), ``"medium"``, ``"hard"`` or a dict of
    :class:`~agentgym_r1.envs.gsm8k.synthetic.Knobs`, recorded in ``info["env"]["difficulty"]``; ``min_steps`` and
    ``max_steps`` override the level's step counts), a path to a JSONL file in the official format, or ``"hf"``
    (``openai/gsm8k``, ``split``).

    **MCP tools.** ``mcp_servers`` (and ``mcp_timeout``) add MCP servers' tools beside the env's own, as in
    :class:`~agentgym_r1.envs.tool_env.ToolEnv`.

    **Version history.** v0: first release.
    """

    def __init__(
        self,
        source: str = "synthetic",
        split: str = "test",
        *,
        seed: int = 0,
        difficulty: Any = "easy",
        min_steps: int | None = None,
        max_steps: int | None = None,
        parser: str | ActionParser = "hermes",
        system_prompt: str | None = None,
        valid_call_reward: float = 0.0,
        failed_call_penalty: float = 0.0,
        format_penalty: float = -0.1,
        step_value_reward: float = 0.0,
        mcp_servers: Sequence[str | Sequence[str]] = (),
        mcp_timeout: float = 30.0,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown(type(self).__name__, kwargs, init_options(type(self)))
        self.source = source
        self.difficulty, knobs = synthetic_knobs(difficulty, min_steps, max_steps)
        if source != "synthetic" and (difficulty != "easy" or min_steps is not None or max_steps is not None):
            raise ConfigError(
                f"difficulty, min_steps and max_steps are options of source='synthetic', not of "
                f"source={source!r} (got difficulty={difficulty!r}, min_steps={min_steps!r}, "
                f"max_steps={max_steps!r})"
            )
        self.step_value_reward = finite_option("step_value_reward", step_value_reward)
        self._unreached: list[str] = []
        super().__init__(
            self.make_tools(),
            load_source(source, split, seed, knobs),
            numeric_reward,
            parser=parser,
            answer_formats=("tag", "hashes", "boxed"),
            system_prompt=SYSTEM_PROMPT if system_prompt is None else system_prompt,
            valid_call_reward=valid_call_reward,
            failed_call_penalty=failed_call_penalty,
            format_penalty=format_penalty,
            render_mode=render_mode,
            mcp_servers=mcp_servers,
            mcp_timeout=mcp_timeout,
        )

    def make_tools(self) -> list[BaseTool]:
        """The episode's tools (a subclass that solves GSM8K with other tools overrides this)."""
        return [Calculator()]

    def _begin(self, options: dict[str, Any]) -> list[EnvMessage]:
        messages = super()._begin(options)
        assert self.task is not None
        if self.step_value_reward:  # reset is a hot path: no reference values unless they are rewarded
            self._unreached = [v for v in map(_value, self.task.meta.get("expert", ())) if v is not None]
        return messages

    def _result_reward(self, call: ToolCall, result: ToolResult) -> float:
        if not self.step_value_reward or call.name != "calculator" or result.text not in self._unreached:
            return 0.0
        self._unreached.remove(result.text)
        return self.step_value_reward

    def env_info(self) -> dict[str, Any]:
        return {"difficulty": self.difficulty} if self.source == "synthetic" else {}

    def no_grade(self) -> Grade:
        return Grade(0.0, False, {"accuracy": 0.0})
