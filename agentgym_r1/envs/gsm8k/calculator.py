"""A safe arithmetic calculator: an AST walker over numbers and ``+ - * / // % **``, never ``eval``."""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
from typing import Any, ClassVar

from agentgym_r1.core.tools import BaseTool, ToolResult

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 1e100
MAX_INT_BITS = 340  # about 1e100

_BINOPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be computed; the message is shown to the agent."""


def _check(value: float | int) -> float | int:
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise CalculatorError("the result is too large")
    elif not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("the result is too large or not a finite number")
    return value


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalculatorError(f"exponents are limited to {MAX_EXPONENT}")
            if left != 0 and abs(right) * math.log2(abs(left) + 1) > MAX_INT_BITS + 8:
                raise CalculatorError("the result is too large")
            if left == 0 and right < 0:
                raise CalculatorError("division by zero")
        try:
            result = _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large") from None
        if isinstance(result, complex):
            raise CalculatorError("the result is not a real number")
        return _check(result)
    if isinstance(node, ast.Name):
        raise CalculatorError(f"names such as {node.id!r} are not allowed; write numbers only")
    raise CalculatorError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % ** and parentheses")


def format_number(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def _parse(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@functools.lru_cache(maxsize=4096)
def _value(text: str) -> float | int | str:
    """The value of a normalised expression, or the error message; cached because rollouts of one task (a GRPO
    group) send the same expressions again and again. Only the value or message is kept, never the syntax tree: a
    500-character expression's tree is thousands of objects, and 4,096 of them cost hundreds of MiB and long pauses
    of every full garbage collection; a number or a string is one object the collector does not track."""
    tree = _parse(text)
    if tree is None:
        return f"cannot parse {text[:80]!r} as arithmetic"
    try:
        return _eval(tree)
    except RecursionError:
        return "the expression is nested too deeply"
    except CalculatorError as e:
        return str(e)


def evaluate(expression: str) -> float | int:
    """The value of an arithmetic expression; raises :class:`CalculatorError` with a message for the agent."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = _THOUSANDS.sub("", expression.strip().replace("×", "*").replace("÷", "/"))
    if "^" in text:
        raise CalculatorError("'^' is not an operator here; write powers as a ** b")
    if not text:
        raise CalculatorError("the expression is empty")
    value = _value(text)
    if isinstance(value, str):
        raise CalculatorError(value)
    return value


class Calculator(BaseTool):
    """The ``calculator`` tool: evaluates one arithmetic expression."""

    name = "calculator"
    description = "Evaluate an arithmetic expression with numbers, + - * / // % ** and parentheses."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "for example (12 + 3) * 4 / 5"}},
        "required": ["expression"],
        "additionalProperties": False,
    }
    timeout = None  # bounded work: runs inline

    def __call__(self, expression: str) -> ToolResult:  # type: ignore[override]
        try:
            return ToolResult(True, format_number(evaluate(expression)))
        except CalculatorError as e:
            return ToolResult(False, f"Error: {e}.")
