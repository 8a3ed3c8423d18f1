"""Tools with JSON-schema arguments, and the runner that calls them safely.

A tool is a :class:`BaseTool`: ``name``, ``description``, ``parameters`` (a JSON schema of an object) and
``__call__(**arguments) -> ToolResult``. Plain typed Python functions become tools with :func:`tool`.

:func:`call_tool` is the one way an env calls a tool: arguments are validated against the schema first, a tool that
raises or runs past its timeout gives an error result, and long output is truncated. Nothing a model sends crashes
the episode.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args, get_origin

import fastjsonschema
import jsonschema

from agentgym_r1.error import InvalidToolSchemaError

DEFAULT_MAX_OUTPUT_CHARS = 4000


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
    ``max_output_chars`` bounds the text the agent sees.
    """

    name: str
    description: str
    parameters: ClassVar[dict[str, Any]] | dict[str, Any]
    timeout: float | None = 30.0
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS

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
        raise InvalidToolSchemaError(f"tool {name!r}: parameters must be a JSON schema dict, got {type(schema).__name__}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise InvalidToolSchemaError(
            f"tool {name!r}: parameters is not a valid JSON schema: {e.message} "
            f"(at {'/'.join(map(str, e.path)) or 'the root'}). Fix the schema, e.g. "
            '{"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}'
        ) from e
    if schema.get("type") != "object":
        raise InvalidToolSchemaError(
            f"tool {name!r}: parameters must describe an object (\"type\": \"object\"), got type {schema.get('type')!r}"
        )
    try:
        return fastjsonschema.compile(dict(schema))
    except fastjsonschema.JsonSchemaDefinitionException as e:
        raise InvalidToolSchemaError(f"tool {name!r}: parameters could not be compiled: {e}") from e


def check_tools(tools: Any) -> dict[str, BaseTool]:
    """Turn a list of tools or functions into ``{name: tool}``, checking names and schemas."""
    out: dict[str, BaseTool] = {}
    for t in tools:
        tool_ = t if isinstance(t, BaseTool) else FunctionTool(t) if callable(t) else None
        if tool_ is None:
            raise InvalidToolSchemaError(f"expected a BaseTool or a typed function, got {t!r}")
        if not isinstance(getattr(tool_, "name", None), str) or not re.fullmatch(r"[A-Za-z_][\w.-]*", tool_.name):
            raise InvalidToolSchemaError(f"tool name must be an identifier-like string, got {getattr(tool_, 'name', None)!r}")
        if tool_.name in out:
            raise InvalidToolSchemaError(f"two tools are named {tool_.name!r}; tool names must be unique")
        tool_.__dict__["_validator"] = compile_schema(tool_.name, tool_.parameters)
        out[tool_.name] = tool_
    return out


# -- calling ----------------------------------------------------------------------------------------------------------
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="agentgym-tool")
    return _executor


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


def run_tool(tool_: BaseTool, arguments: dict[str, Any]) -> ToolResult:
    """Call a tool on validated arguments with its timeout; coerce the result and truncate it."""
    try:
        if tool_.timeout is None:
            result = tool_(**arguments)
        else:
            future = _pool().submit(lambda: tool_(**arguments))
            result = future.result(timeout=tool_.timeout)
    except concurrent.futures.TimeoutError:
        return ToolResult(False, f"Error: {tool_.name} did not answer within {tool_.timeout:g} s.")
    except Exception as e:  # a tool's own failure is the agent's observation, not a crash
        return ToolResult(False, f"Error: {tool_.name} failed: {type(e).__name__}: {truncate(str(e), 300)}")
    if not isinstance(result, ToolResult):
        text = result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False)
        result = ToolResult(True, text)
    if len(result.text) > tool_.max_output_chars:
        result = ToolResult(result.ok, truncate(result.text, tool_.max_output_chars), result.reward)
    return result


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

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
                 timeout: float | None = 30.0, max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> None:
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

    def __call__(self, **arguments: Any) -> ToolResult:
        out = self.fn(**arguments)
        if isinstance(out, ToolResult):
            return out
        return ToolResult(True, out if isinstance(out, str) else json.dumps(out, default=str, ensure_ascii=False))


def tool(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """Decorator (or function) turning a typed function into a :class:`FunctionTool`: ``@tool`` or ``@tool(timeout=5)``."""
    if fn is None:
        return lambda f: FunctionTool(f, **kwargs)
    return FunctionTool(fn, **kwargs)
