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
    [({}, "city"), ({"city": 3}, "string"), ({"city": "x", "days": "2"}, "integer"), ({"city": "x", "bogus": 1}, "bogus"),
     ({"city": "x", "unit": "K"}, "one of"), ("notadict", "object")],
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
