"""Tools with JSON-schema arguments, and the runner that calls them safely.

A tool is a :class:`BaseTool`: ``name``, ``description``, ``parameters`` (a JSON schema of an object) and
``__call__(**arguments) -> ToolResult``. Plain typed Python functions become tools with :func:`tool`.

:func:`call_tool` is the one way an env calls a tool: arguments are validated against the schema first, a tool that
raises or runs past its timeout gives an error result, and long output is truncated. Nothing a model sends crashes
the episode.

**Timeouts and hung tools.** A tool's ``isolation`` says where its calls run. ``"thread"`` (default): a call with a
``timeout`` runs in its own daemon thread and the env waits at most that long. Python cannot stop a thread, so a call
that times out is *abandoned*, not killed: it goes on running until the tool returns, and its side effects still
happen, unless the tool cooperates: it can poll :func:`cancelled` (true in the call's thread once the env stopped
waiting) and stop before acting. Abandoned calls are counted per *kind* of tool (its class, or its function, and its
name), so the many instances that factory-made envs build share one count, and a hung tool never uses up another
kind's: at ``max_abandoned_calls`` of its kind still running, or :data:`MAX_ABANDONED_THREADS` of all kinds, the tool
answers "unavailable" without starting another thread, until one of them returns. Abandoned threads in a process stay
at most :data:`MAX_ABANDONED_THREADS`, however many envs and calls hang.

``"process"``: the tool is pickled to a worker process of its own (:class:`~agentgym_r1.core.workers.ProcessWorker`,
started on its first call) and each call is sent there; past its ``timeout`` the process is killed, so a hung or
runaway call is stopped, not abandoned, and the next call starts a fresh process. A call costs a round trip through
a pipe (well under a millisecond) and the first call of each process its start (a new interpreter, ~0.1-1 s). A
tool that cannot be pickled raises :class:`~agentgym_r1.error.ToolNotPicklableError` when its env is built.
"""

from __future__ import annotations

import inspect
import json
import math
import pickle
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args, get_origin

import fastjsonschema
import jsonschema

from agentgym_r1.core.workers import ProcessWorker
from agentgym_r1.error import (
    ConfigError,
    InvalidToolSchemaError,
    ToolNotPicklableError,
    WorkerDied,
    WorkerTimeout,
)

DEFAULT_MAX_OUTPUT_CHARS = 4000
MAX_ABANDONED_THREADS = 64  # timed-out tool calls still running in this process, all tools together
ISOLATIONS = ("thread", "process")
Isolation = Literal["thread", "process"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returns: whether it worked, the text the agent sees, and an optional reward."""

    ok: bool
    text: str
    reward: float = 0.0


class BaseTool:
    """A tool an agent can call.

    Subclasses set ``name``, ``description`` and ``parameters`` (class attributes or in ``__init__``) and implement
    ``__call__``. ``timeout`` is seconds per call (``None``: the call runs inline, for tools whose cost is bounded);
    ``max_output_chars`` bounds the text the agent sees; ``isolation`` is ``"thread"`` or ``"process"`` (see the
    module docstring).
    """

    name: str
    description: str
    parameters: ClassVar[dict[str, Any]] | dict[str, Any]
    timeout: float | None = 30.0
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    max_abandoned_calls: int = 4
    isolation: Isolation = "thread"

    def __getstate__(self) -> dict[str, Any]:
        """What goes to a worker process: not the compiled validator nor this process's worker and lock."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_validator", "_process")}

    def __call__(self, **arguments: Any) -> ToolResult:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Hermes function schema: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def close(self) -> None:
        """Free what the tool holds (connections, processes). Called by the env's ``close``."""

    # -- validation, compiled once per tool -------------------------------------------------------------------------
    def validate(self, arguments: Any) -> str | None:
        """``None`` when ``arguments`` fit the schema, else a short message saying what is wrong."""
        validator = self.__dict__.get("_validator")
        if validator is None:
            validator = compile_schema(self.name, self.parameters)
            self.__dict__["_validator"] = validator
        try:
            validator(arguments)
        except fastjsonschema.JsonSchemaValueException as e:
            return e.message.replace("data.", "argument ", 1).replace("data ", "arguments ", 1)
        return None


def compile_schema(name: str, schema: Any) -> Callable[[Any], Any]:
    """Check ``schema`` is a valid JSON schema of an object and compile a fast validator for it."""
    if not isinstance(schema, Mapping):
        raise InvalidToolSchemaError(
            f"tool {name!r}: parameters must be a JSON schema dict, got {type(schema).__name__}"
        )
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise InvalidToolSchemaError(
            f"tool {name!r}: parameters is not a valid JSON schema: {e.message} "
            f"(at {'/'.join(map(str, e.path)) or 'the root'}). Fix the schema, e.g. "
            '{"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}'
        ) from e
    remote = _remote_ref(schema)
    if remote is not None:
        raise InvalidToolSchemaError(
            f'tool {name!r}: parameters refer to {remote!r}; only local references ("$ref": "#/$defs/...") are '
            "allowed, since a remote one would be fetched over the network when the env is built. Inline the schema."
        )
    if schema.get("type") != "object":
        raise InvalidToolSchemaError(
            f'tool {name!r}: parameters must describe an object ("type": "object"), got type {schema.get("type")!r}'
        )
    try:
        return fastjsonschema.compile(dict(schema))
    except fastjsonschema.JsonSchemaDefinitionException as e:
        raise InvalidToolSchemaError(f"tool {name!r}: parameters could not be compiled: {e}") from e


def _remote_ref(schema: Any) -> str | None:
    """The first ``$ref`` that is not a local ``#...`` pointer (fastjsonschema would fetch it with urlopen)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                return ref
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def check_tools(tools: Any, isolation: Isolation | None = None) -> dict[str, BaseTool]:
    """Turn a list of tools or functions into ``{name: tool}``, checking names and schemas; ``isolation``, when
    given, is set on every tool."""
    out: dict[str, BaseTool] = {}
    for t in tools:
        tool_ = t if isinstance(t, BaseTool) else FunctionTool(t) if callable(t) else None
        if tool_ is None:
            raise InvalidToolSchemaError(f"expected a BaseTool or a typed function, got {t!r}")
        if not isinstance(getattr(tool_, "name", None), str) or not re.fullmatch(r"[A-Za-z_][\w.-]*", tool_.name):
            raise InvalidToolSchemaError(
                f"tool name must be an identifier-like string, got {getattr(tool_, 'name', None)!r}"
            )
        if tool_.name in out:
            raise InvalidToolSchemaError(f"two tools are named {tool_.name!r}; tool names must be unique")
        tool_.__dict__["_validator"] = compile_schema(tool_.name, tool_.parameters)
        if isolation is not None:
            tool_.isolation = isolation
        check_isolation(tool_)
        out[tool_.name] = tool_
    return out


def check_isolation(tool_: BaseTool) -> None:
    """A known ``isolation``; for ``"process"``, a tool that pickles (it is sent to its worker process)."""
    if tool_.isolation not in ISOLATIONS:
        raise ConfigError(f"tool {tool_.name!r}: isolation must be one of {list(ISOLATIONS)}, got {tool_.isolation!r}")
    if tool_.isolation == "process":
        try:
            pickle.dumps(tool_)
        except Exception as e:
            raise ToolNotPicklableError(
                f"tool {tool_.name!r} has isolation='process', so it is sent to a worker process, and it cannot be "
                f"pickled ({type(e).__name__}: {e}); define its function or class at module level and keep "
                "unpicklable state (connections, locks) out of __init__ (open it on the first call), or use "
                "isolation='thread'"
            ) from e


# -- calling ----------------------------------------------------------------------------------------------------------
_local = threading.local()


def cancelled() -> bool:
    """In a tool's call: whether the env stopped waiting for it (the call timed out). A tool that can stop part way
    (before a side effect, between chunks of work) checks this and returns; other calls run to completion."""
    event = getattr(_local, "cancelled", None)
    return event is not None and event.is_set()


_ABANDONED_LOCK = threading.Lock()
_abandoned: dict[tuple[str, str, str], int] = {}  # timed-out calls still running, by kind of tool


def _kind(tool_: BaseTool) -> tuple[str, str, str]:
    """What the instances of one tool share: its function (or class) and its name."""
    made_from = getattr(tool_, "fn", type(tool_))
    return getattr(made_from, "__module__", ""), getattr(made_from, "__qualname__", ""), tool_.name


def abandoned_calls(tool_: BaseTool) -> int:
    """How many timed-out calls of ``tool_``'s kind (its instances in every env) are still running."""
    return _abandoned.get(_kind(tool_), 0)


def abandoned_threads() -> int:
    """How many timed-out tool calls of any kind are still running in this process (at most
    :data:`MAX_ABANDONED_THREADS`)."""
    return sum(_abandoned.values())


def _count_abandoned(kind: tuple[str, str, str], delta: int) -> None:
    """Under ``_ABANDONED_LOCK``."""
    _abandoned[kind] = _abandoned.get(kind, 0) + delta
    if not _abandoned[kind]:
        del _abandoned[kind]


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... truncated {len(text) - limit} characters]"


def invalid_arguments(tool_: BaseTool, problem: str) -> ToolResult:
    return ToolResult(False, f"Error: invalid arguments for {tool_.name}: {problem}.")


def call_tool(tool_: BaseTool, arguments: Any) -> ToolResult:
    """Validate, then :func:`run_tool`. Never raises for anything the model sent."""
    problem = tool_.validate(arguments)
    return invalid_arguments(tool_, problem) if problem is not None else run_tool(tool_, arguments)


def _in_thread(tool_: BaseTool, arguments: dict[str, Any], timeout: float) -> Any:
    """Run the call in a daemon thread (it never blocks interpreter exit); raise TimeoutError past ``timeout``."""
    kind, box, done, stop = _kind(tool_), {}, threading.Event(), threading.Event()

    def target() -> None:
        _local.cancelled = stop
        try:
            box["result"] = tool_(**arguments)
        except BaseException as e:  # handed to the caller below
            box["error"] = e
        finally:
            with _ABANDONED_LOCK:
                done.set()
                if stop.is_set():
                    _count_abandoned(kind, -1)

    threading.Thread(target=target, name=f"agentgym-tool-{tool_.name}", daemon=True).start()
    if not done.wait(timeout):
        with _ABANDONED_LOCK:
            if not done.is_set():
                stop.set()
                _count_abandoned(kind, 1)
                raise TimeoutError
    if "error" in box:
        raise box["error"]
    return box["result"]


def run_tool(tool_: BaseTool, arguments: dict[str, Any]) -> ToolResult:
    """Call a tool on validated arguments with its timeout and isolation; coerce the result and truncate it."""
    if tool_.isolation == "process":
        return _in_process(tool_, arguments)
    if tool_.timeout is not None and (
        abandoned_calls(tool_) >= tool_.max_abandoned_calls or abandoned_threads() >= MAX_ABANDONED_THREADS
    ):
        return ToolResult(
            False,
            f"Error: {tool_.name} is unavailable: {abandoned_calls(tool_)} earlier calls of it "
            f"({abandoned_threads()} of all tools) did not answer within their timeout and are "
            "still running.",
        )
    try:
        result = tool_(**arguments) if tool_.timeout is None else _in_thread(tool_, arguments, tool_.timeout)
    except TimeoutError:
        return ToolResult(False, f"Error: {tool_.name} did not answer within {tool_.timeout:g} s.")
    except Exception as e:  # a tool's own failure is the agent's observation, not a crash
        return ToolResult(False, f"Error: {tool_.name} failed: {type(e).__name__}: {truncate(str(e), 300)}")
    return _coerce(tool_, result)


# -- tools in worker processes ----------------------------------------------------------------------------------------
_TOOL: BaseTool | None = None  # in a tool's worker process: the tool


def _set_tool(tool_: BaseTool) -> None:
    global _TOOL
    _TOOL = tool_


def _call_in_worker(arguments: dict[str, Any]) -> Any:
    assert _TOOL is not None
    return _TOOL(**arguments)


def _close_in_worker() -> None:
    assert _TOOL is not None
    _TOOL.close()


class _Process:
    """A tool's worker process, and the lock that keeps one call at a time on its pipe."""

    def __init__(self, tool_: BaseTool) -> None:
        self.lock = threading.Lock()
        self.worker = ProcessWorker(_set_tool, tool_, name=f"agentgym tool {tool_.name}")


def _process_of(tool_: BaseTool) -> _Process:
    proc = tool_.__dict__.get("_process")
    if proc is None:
        with _ABANDONED_LOCK:  # two threads calling a new tool at once get one process
            proc = tool_.__dict__.setdefault("_process", _Process(tool_))
    return proc


def _in_process(tool_: BaseTool, arguments: dict[str, Any]) -> ToolResult:
    """The call in the tool's worker process; past the timeout the process is killed (the next call starts one)."""
    proc, timeout = _process_of(tool_), tool_.timeout
    if not proc.lock.acquire(timeout=-1 if timeout is None else timeout):
        return ToolResult(False, f"Error: {tool_.name} is busy with another call (it runs in one process).")
    try:
        result = proc.worker.call(_call_in_worker, arguments, timeout=timeout)
    except WorkerTimeout:
        return ToolResult(False, f"Error: {tool_.name} did not answer within {timeout:g} s; it was stopped.")
    except WorkerDied as e:
        return ToolResult(False, f"Error: {tool_.name} stopped before it answered ({truncate(str(e), 300)}).")
    except Exception as e:  # the tool's own failure, raised in its process
        return ToolResult(False, f"Error: {tool_.name} failed: {type(e).__name__}: {truncate(str(e), 300)}")
    finally:
        proc.lock.release()
    return _coerce(tool_, result)


def close_tool(tool_: BaseTool) -> None:
    """``tool_.close()``, and for a tool in a process its ``close`` there (unless a call is in flight), then the
    process is stopped. Envs close their tools with this."""
    tool_.close()
    proc = tool_.__dict__.get("_process")
    if proc is None:
        return
    if proc.lock.acquire(blocking=False):
        try:
            proc.worker.close(_close_in_worker, timeout=min(tool_.timeout or 5.0, 5.0))
        finally:
            proc.lock.release()
    else:  # a call waits on the pipe: killing the process ends it with an error result
        proc.worker.kill()


def _coerce(tool_: BaseTool, result: Any) -> ToolResult:
    """A :class:`ToolResult` with string text, a finite reward and bounded length, whatever the tool returned."""
    if isinstance(result, ToolResult):
        ok, text, reward = bool(result.ok), result.text, result.reward
        if not isinstance(text, str):
            ok, text = (
                False,
                f"Error: {tool_.name} returned a result whose text is {type(text).__name__}, not a string.",
            )
    else:
        ok, text, reward = True, result, 0.0
    if not isinstance(text, str):
        try:
            text = json.dumps(text, default=str, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):  # a circular list or dict, an object json cannot write
            ok, text = False, f"Error: {tool_.name} returned a {type(text).__name__} that cannot be written as text."
    try:
        reward = float(reward)
    except (TypeError, ValueError):
        reward = math.nan
    if not math.isfinite(reward):
        ok, reward = False, 0.0
        text = f"{text}\n[{tool_.name} returned a reward that is not a finite number; it counts as 0]"
    if len(text) > tool_.max_output_chars:
        text = truncate(text, tool_.max_output_chars)
    return ToolResult(ok, text, reward)


# -- functions as tools -----------------------------------------------------------------------------------------------
_SIMPLE_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(annotation: Any) -> dict[str, Any]:
    if annotation in _SIMPLE_TYPES:
        return {"type": _SIMPLE_TYPES[annotation]}
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        schemas = [_type_schema(a) for a in non_none]
        if type(None) in args:
            schemas.append({"type": "null"})
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if annotation is Any or annotation is inspect.Parameter.empty:
        return {}
    raise InvalidToolSchemaError(
        f"cannot turn the annotation {annotation!r} into a JSON schema; use str, int, float, bool, list, dict, "
        "Literal or Optional of those, or write a BaseTool with an explicit schema"
    )


def _doc_parts(doc: str) -> tuple[str, dict[str, str]]:
    """The summary and the ``Args:`` descriptions of a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    summary, _, rest = doc.partition("\n\n")
    params: dict[str, str] = {}
    m = re.search(r"^(?:Args|Arguments|Parameters):\s*\n(.*?)(?:\n\S|\Z)", rest, re.S | re.M)
    if m:
        for line in m.group(1).splitlines():
            pm = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)", line)
            if pm:
                params[pm.group(1)] = pm.group(2).strip()
    return " ".join(summary.split()), params


class FunctionTool(BaseTool):
    """A tool made from a typed Python function: the schema from the signature, the description from the docstring."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = 30.0,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        isolation: Isolation = "thread",
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        summary, param_docs = _doc_parts(fn.__doc__ or "")
        self.description = description or summary or self.name
        hints = typing.get_type_hints(fn)
        props: dict[str, Any] = {}
        required: list[str] = []
        for pname, p in inspect.signature(fn).parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            schema = _type_schema(hints.get(pname, Any))
            if pname in param_docs:
                schema["description"] = param_docs[pname]
            props[pname] = schema
            if p.default is inspect.Parameter.empty:
                required.append(pname)
        self.parameters = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        self.timeout = timeout
        self.max_output_chars = max_output_chars
        self.isolation = isolation

    def __call__(self, **arguments: Any) -> ToolResult:
        out = self.fn(**arguments)
        if isinstance(out, ToolResult):
            return out
        return ToolResult(True, out if isinstance(out, str) else json.dumps(out, default=str, ensure_ascii=False))


def tool(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Decorator (or function) turning a typed function into a :class:`FunctionTool`: ``@tool`` or
    ``@tool(timeout=5)``."""
    if fn is None:
        return lambda f: FunctionTool(f, **kwargs)
    return FunctionTool(fn, **kwargs)
