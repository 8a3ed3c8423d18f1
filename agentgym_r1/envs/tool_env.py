"""``AgentR1/ToolEnv-v0``: a generic multi-turn tool-use environment."""

from __future__ import annotations

import math
import numbers
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentgym_r1.core.env import Env, EnvMessage, Grade, Turn, finite_option, init_options, reject_unknown
from agentgym_r1.core.native import make_parser
from agentgym_r1.core.parsers import (
    ActionParser,
    AnswerFormat,
    ParsedAction,
    ToolCall,
    primary_argument,
)
from agentgym_r1.core.rewards import exact_match
from agentgym_r1.core.tasks import Task, TaskSource, as_source
from agentgym_r1.core.tools import (
    BaseTool,
    Isolation,
    ToolResult,
    check_tools,
    close_tool,
    invalid_arguments,
    run_tool,
)
from agentgym_r1.error import ConfigError, RewardFunctionError, ToolNameClashError

RewardFn = Callable[[str, Task], "float | Grade"]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Solve the user's task, using the tools when they help."


def exact_match_reward(prediction: str, task: Task) -> Grade:
    em = exact_match(prediction, task.answer if isinstance(task.answer, str | list) else str(task.answer))
    return Grade(em, em == 1.0, {"em": em})


def _fn_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def check_reward_fn(fn: Any) -> RewardFn:
    """``fn`` if it can be a reward function; :class:`RewardFunctionError` now (not at the first answer) when it is
    not callable or its return annotation says it returns something other than a number or a :class:`Grade`."""
    if not callable(fn):
        raise RewardFunctionError(
            f"reward_fn must be a function (prediction, task) -> float | Grade, got a {type(fn).__name__}: {fn!r:.80}"
        )
    try:
        returns = typing.get_type_hints(fn).get("return")
    except (NameError, TypeError, AttributeError):  # annotations that do not resolve: checked at the first answer
        returns = None
    if returns in (str, bytes, type(None), list, dict, tuple):
        raise RewardFunctionError(
            f"reward_fn {_fn_name(fn)} is annotated to return {returns.__name__}; it must return "
            "a float (the outcome reward, solved at >= 1) or a Grade"
        )
    return fn


def grade_of(fn: RewardFn, value: Any) -> Grade:
    """What ``fn`` returned, as a :class:`Grade`: a number is the score, solved at >= 1. A non-finite score is never a
    success (the base class then counts it as 0, with a RuntimeWarning); anything that is not a number or a Grade
    is :class:`RewardFunctionError`, naming the function and the type it returned."""
    score, solved, metrics = (
        (value.score, value.success, value.metrics) if isinstance(value, Grade) else (value, None, {})
    )
    if not isinstance(score, numbers.Real):
        what = (
            f"a Grade whose score is a {type(score).__name__}"
            if isinstance(value, Grade)
            else f"a {type(value).__name__}"
        )
        raise RewardFunctionError(
            f"reward_fn {_fn_name(fn)} returned {what} ({value!r:.80}); it must return a float "
            "(the outcome reward, solved at >= 1) or a Grade(score, success, metrics)"
        )
    try:
        score = float(score)
    except OverflowError:  # an int past float range
        score = math.inf
    solved = score >= 1.0 if solved is None else bool(solved)
    return Grade(score, solved and math.isfinite(score), metrics)


def add_mcp_tools(
    tools: dict[str, BaseTool], servers: Sequence[Any], timeout: float
) -> tuple[Any, dict[str, BaseTool]]:
    """Connect to ``servers`` (:class:`~agentgym_r1.core.mcp_tools.McpClients`) and add their tools to ``tools``;
    a name two tools share is refused (:class:`ToolNameClashError`, naming both), after closing the servers."""
    if timeout <= 0:
        raise ConfigError(f"mcp_timeout must be a positive number of seconds, got {timeout!r}")
    from agentgym_r1.core.mcp_tools import McpClients, McpTool

    clients = McpClients(servers, timeout)
    out = dict(tools)
    try:
        for t in clients.tools:
            check_tools([t])  # its name and schema, checked as a Python tool's
            if t.name in out:
                other = out[t.name]
                theirs = (
                    f"one of MCP server {other.server!r}"
                    if isinstance(other, McpTool)
                    else f"the Python tool {_fn_name(getattr(other, 'fn', type(other)))}"
                )
                raise ToolNameClashError(
                    f"two tools are named {t.name!r}: one of MCP server {t.server!r} and "
                    f"{theirs}; tool names must be unique. Rename one, or leave one out."
                )
            out[t.name] = t
    except BaseException:
        clients.close()
        raise
    return clients, out


class ToolEnv(Env):
    """A multi-turn tool-use environment over any tools, tasks and reward function.

    **Description.** The agent gets a task and may call tools (given as :class:`BaseTool` instances or typed Python
    functions) over several turns, then gives an answer. The system prompt lists the tool schemas and the action
    format.

    **Observation.** At reset: the system prompt, a blank line and the task prompt. After a tool call: each tool's
    result, rendered by the action format (Hermes: ``<tool_response>...</tool_response>``). After an invalid action:
    a message saying what was wrong and what is expected.

    **Action.** Text in the chosen format: ``parser="hermes"`` (default), ``"tag"``, ``"command"`` or ``"auto"`` (the
    model family's own tool calls, :mod:`agentgym_r1.core.native`; the rollout engine picks the family from the
    tokenizer); an answer as ``<answer>...</answer>`` (``answer[...]`` for commands).

    **Reward.** ``outcome``: ``reward_fn(answer, task)`` when the agent answers (default: exact match).
    ``process``: ``valid_call_reward`` per successful call, ``failed_call_penalty`` per failed call (unknown tool, bad
    arguments, the tool erred or timed out), plus any reward the tool returns. ``format``: ``format_penalty`` for an
    action that does not parse.

    **Episode end.** Terminated on an answer; truncated by the registered turn limit (``max_episode_steps``, 8).

    **Tools' isolation.** ``tool_isolation="process"`` runs every tool in a worker process of its own, killed at the
    tool's ``timeout`` (a hung or runaway call is stopped, not abandoned); ``None`` keeps each tool's own
    ``isolation`` (``"thread"`` by default). See :mod:`agentgym_r1.core.tools`.

    **MCP tools.** ``mcp_servers``: MCP servers whose tools are listed beside the Python ones, each a stdio command
    (``["python", "server.py"]``) or a streamable-HTTP URL; each call is bounded by ``mcp_timeout`` seconds, and a
    server that errs, crashes or hangs gives an error observation (it is restarted on the next call). They run in
    their own processes whatever ``tool_isolation`` says. See :mod:`agentgym_r1.core.mcp_tools`.

    **Data sources.** ``tasks``: a list of ``{"prompt", "answer"}`` dicts or :class:`Task`, or a :class:`TaskSource`.

    **Version history.** v0: first release.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]] = (),
        tasks: TaskSource | Sequence[Task | Mapping[str, Any]] | None = None,
        reward_fn: RewardFn | None = None,
        *,
        parser: str | ActionParser = "hermes",
        answer_formats: Sequence[AnswerFormat] = ("tag",),
        system_prompt: str | None = None,
        valid_call_reward: float = 0.0,
        failed_call_penalty: float = 0.0,
        format_penalty: float = -0.1,
        max_calls_per_turn: int = 8,
        tool_isolation: Isolation | None = None,
        mcp_servers: Sequence[str | Sequence[str]] = (),
        mcp_timeout: float = 30.0,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown(type(self).__name__, kwargs, init_options(type(self)))
        super().__init__(render_mode=render_mode)
        self.tools = check_tools(tools, tool_isolation)
        self.tasks = as_source(tasks)
        self.reward_fn = exact_match_reward if reward_fn is None else check_reward_fn(reward_fn)
        self.parser = make_parser(parser, answer_formats)
        self.valid_call_reward = finite_option("valid_call_reward", valid_call_reward)
        self.failed_call_penalty = finite_option("failed_call_penalty", failed_call_penalty)
        self.format_penalty = finite_option("format_penalty", format_penalty)
        self.max_calls_per_turn = int(max_calls_per_turn)
        self.mcp = None  # servers are started last: a bad option above is refused before any work
        if mcp_servers:
            self.mcp, self.tools = add_mcp_tools(self.tools, mcp_servers, finite_option("mcp_timeout", mcp_timeout))
        base = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
        self.system_prompt = f"{base}\n\n{self.parser.instructions(self.tools)}" if self.tools else base
        self.task: Task | None = None

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools in OpenAI function format, for chat templates that take ``tools=``."""
        return [t.schema() for t in self.tools.values()]

    def _begin(self, options: dict[str, Any]) -> list[EnvMessage]:
        self.task = self.pick(self.tasks, options)
        return [
            EnvMessage("system", self.system_prompt),
            EnvMessage(None, "\n\n"),
            EnvMessage("user", self.task.prompt),
        ]

    def _act(self, action: str) -> Turn:
        parsed = self.parser.parse(action, self.tools)
        if parsed.kind == "command":
            parsed = self._command_to_call(parsed)
        if parsed.kind == "invalid":
            return Turn(
                parsed.to_info(),
                [EnvMessage("user", parsed.error or "")],
                format=self.format_penalty,
                valid=False,
                error=parsed.error,
            )
        turn = self._answer(parsed.answer or "") if parsed.kind == "answer" else self._call_tools(parsed)
        if parsed.note:  # the parser saw a call after the answer, or an answer beside the calls
            turn.messages.extend([EnvMessage(None, "\n"), EnvMessage("user", parsed.note)])
        return turn

    def _answer(self, answer: str) -> Turn:
        assert self.task is not None
        grade = grade_of(self.reward_fn, self.reward_fn(answer, self.task))
        self.grade = grade
        return Turn({"kind": "answer", "answer": answer}, outcome=grade.score, terminated=True)

    def _call_tools(self, parsed: ParsedAction) -> Turn:
        calls = parsed.calls
        turn = Turn(parsed.to_info())
        errors: list[str] = []
        for i, call in enumerate(calls):
            tool_ = self.tools.get(call.name)
            if i >= self.max_calls_per_turn:
                ok, text = (
                    False,
                    f"Error: more than {self.max_calls_per_turn} tool calls in one turn; this one was skipped.",
                )
                errors.append(text)
            elif tool_ is None:
                ok, text = False, f"Error: unknown tool {call.name!r}; the tools are {sorted(self.tools)}."
                errors.append(text)
            elif (problem := tool_.validate(call.arguments)) is not None:
                ok, text = False, invalid_arguments(tool_, problem).text
                errors.append(text)
            else:
                result = run_tool(tool_, call.arguments)
                ok, text = result.ok, result.text
                turn.process += result.reward + (self._result_reward(call, result) if ok else 0.0)
            turn.process += self.valid_call_reward if ok else self.failed_call_penalty
            if turn.messages:
                turn.messages.append(EnvMessage(None, "\n"))
            turn.messages.append(EnvMessage("tool", self.parser.render_result(call.name, text), text))
        if errors:
            turn.valid, turn.error = False, " ".join(errors)
        return turn

    def _result_reward(self, call: ToolCall, result: ToolResult) -> float:
        """Process reward for a call that ran and worked, on top of the tool's own; subclasses that can judge a
        result against the task override it (none by default)."""
        return 0.0

    def _command_to_call(self, parsed: ParsedAction) -> ParsedAction:
        tool_ = self.tools.get(parsed.verb or "")
        if tool_ is None:
            return ParsedAction(
                "invalid",
                error=f"Invalid action: unknown command {parsed.verb!r}; the commands are "
                f"{sorted(self.tools)} and answer[...].",
            )
        key = primary_argument(tool_)
        return ParsedAction("tool_call", calls=[ToolCall(tool_.name, {key: parsed.arg} if key else {})])

    def close(self) -> None:
        for t in self.tools.values():
            close_tool(t)
        if self.mcp is not None:
            self.mcp.close()
        super().close()
