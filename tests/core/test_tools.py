import time
from typing import Literal

import pytest

from agentgym_r1.core.tools import BaseTool, FunctionTool, ToolResult, call_tool, check_tools, tool
from agentgym_r1.error import InvalidToolSchemaError


def weather(city: str, days: int = 1, unit: Literal["C", "F"] = "C", tags: list[str] | None = None) -> dict:
    """Forecast for a city.

    Args:
        city: the city's name
        days (int): how many days ahead
    """
    return {"city": city, "days": days, "unit": unit}


def test_function_tool_schema_from_signature_and_docstring():
    t = FunctionTool(weather)
    assert t.name == "weather" and t.description == "Forecast for a city."
    props = t.parameters["properties"]
    assert props["city"] == {"type": "string", "description": "the city's name"}
    assert props["days"] == {"type": "integer", "description": "how many days ahead"}
    assert props["unit"] == {"enum": ["C", "F"]}
    assert props["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    assert t.parameters["required"] == ["city"]
    assert call_tool(t, {"city": "Oslo", "days": 2}) == ToolResult(True, '{"city": "Oslo", "days": 2, "unit": "C"}')


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "city"),
        ({"city": 3}, "string"),
        ({"city": "x", "days": "2"}, "integer"),
        ({"city": "x", "bogus": 1}, "bogus"),
        ({"city": "x", "unit": "K"}, "one of"),
        ("notadict", "object"),
    ],
)
def test_arguments_are_validated_against_the_schema(args, problem):
    result = call_tool(FunctionTool(weather), args)
    assert not result.ok
    assert result.text.startswith("Error: invalid arguments for weather")
    assert problem in result.text


def test_timeout_raising_and_truncation():
    @tool(timeout=0.2)
    def slow() -> str:
        """Sleeps."""
        time.sleep(2)
        return "late"

    start = time.perf_counter()
    r = call_tool(slow, {})
    assert not r.ok and "within 0.2 s" in r.text
    assert time.perf_counter() - start < 1.5

    @tool
    def boom(x: int) -> str:
        """Raises."""
        raise KeyError(x)

    r = call_tool(boom, {"x": 1})
    assert not r.ok and "KeyError" in r.text

    @tool(max_output_chars=10)
    def big() -> str:
        """Long output."""
        return "y" * 100

    r = call_tool(big, {})
    assert r.ok and r.text.startswith("y" * 10) and "truncated 90 characters" in r.text


def test_invalid_schemas_raise_named_errors():
    class Bad(BaseTool):
        name = "bad"
        description = "bad schema"
        parameters = {"type": "object", "properties": {"q": {"type": "strng"}}}

    with pytest.raises(InvalidToolSchemaError, match="not a valid JSON schema"):
        check_tools([Bad()])

    class NotObject(Bad):
        parameters = {"type": "string"}

    with pytest.raises(InvalidToolSchemaError, match="must describe an object"):
        check_tools([NotObject()])
    with pytest.raises(InvalidToolSchemaError, match="unique"):
        check_tools([weather, weather])
    with pytest.raises(InvalidToolSchemaError, match="BaseTool or a typed function"):
        check_tools([42])

    def untyped(x: set[complex]) -> str:
        return ""

    with pytest.raises(InvalidToolSchemaError, match="cannot turn the annotation"):
        FunctionTool(untyped)


def test_schema_for_chat_templates():
    assert FunctionTool(weather).schema()["function"]["name"] == "weather"


# -- hung tools, odd results, remote references ----------------------------------------------------------------------
import threading  # noqa: E402

from agentgym_r1.core.tools import abandoned_calls, cancelled, run_tool  # noqa: E402


class _Hangs(BaseTool):
    """Blocks until released; counts the side effects it performs."""

    name = "hangs"
    description = "hangs"
    parameters = {"type": "object", "properties": {}}
    timeout = 0.01

    def __init__(self, cooperative: bool = False) -> None:
        self.release, self.cooperative, self.effects = threading.Event(), cooperative, 0

    def __call__(self) -> ToolResult:
        self.release.wait(30)
        if not (self.cooperative and cancelled()):
            self.effects += 1
        return ToolResult(True, "late")


def test_a_thousand_hung_calls_keep_threads_bounded_and_report_the_tool_unavailable():
    hung = _Hangs()
    before = threading.active_count()
    results = [run_tool(hung, {}) for _ in range(1000)]
    try:
        assert threading.active_count() - before <= hung.max_abandoned_calls + 1
        assert abandoned_calls(hung) == hung.max_abandoned_calls
        assert all("did not answer" in r.text for r in results[: hung.max_abandoned_calls])
        assert all("unavailable" in r.text and not r.ok for r in results[hung.max_abandoned_calls :])
    finally:
        hung.release.set()
    deadline = time.monotonic() + 10
    while abandoned_calls(hung) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert abandoned_calls(hung) == 0  # the calls returned: the tool is available again
    assert run_tool(hung, {}).ok


class _Other(_Hangs):
    name = "other"


def test_a_hung_tool_uses_only_its_own_capacity():
    """Only its own kind's: another kind of tool still runs (instances of one kind share it: test_tool_isolation)."""
    hung, other = _Hangs(), _Other()
    other.timeout = 5.0
    other.release.set()
    try:
        for _ in range(100):
            run_tool(hung, {})
        assert run_tool(other, {}) == ToolResult(True, "late")  # the old shared pool of 32 was exhausted by now
    finally:
        hung.release.set()


def test_a_cooperative_tool_skips_its_side_effect_after_a_timeout():
    hung = _Hangs(cooperative=True)
    assert "did not answer" in run_tool(hung, {}).text
    hung.release.set()
    deadline = time.monotonic() + 10
    while abandoned_calls(hung) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hung.effects == 0


class _Returns(BaseTool):
    name = "returns"
    description = "returns what it is given"
    parameters = {"type": "object", "properties": {}}
    timeout = None

    def __init__(self, value: object) -> None:
        self.value = value

    def __call__(self) -> object:
        return self.value


def _circular() -> list:
    a: list = []
    a.append(a)
    return a


@pytest.mark.parametrize(
    "value",
    [
        _circular(),
        ToolResult(True, None),
        ToolResult(True, "x", float("nan")),
        ToolResult(True, "x", float("inf")),
        ToolResult(True, "x", "high"),
    ],
)
def test_odd_results_become_error_text_with_a_finite_reward(value):
    result = run_tool(_Returns(value), {})
    assert isinstance(result.text, str) and result.reward == 0.0 and not result.ok


def test_a_remote_ref_is_refused_before_any_fetch():
    class Remote(BaseTool):
        name, description = "remote", "remote"
        parameters = {"type": "object", "properties": {"q": {"$ref": "http://127.0.0.1:9/schema.json"}}}

    with pytest.raises(InvalidToolSchemaError, match="local references"):
        check_tools([Remote()])
    local = {"type": "object", "$defs": {"q": {"type": "string"}}, "properties": {"q": {"$ref": "#/$defs/q"}}}
    Remote.parameters = local
    assert check_tools([Remote()])["remote"].validate({"q": 1}) is not None
