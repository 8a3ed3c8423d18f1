import pytest

from agentgym_r1.core.parsers import CommandParser, HermesParser, TagParser, find_answer, make_parser
from agentgym_r1.envs.gsm8k.calculator import Calculator
from agentgym_r1.error import ConfigError

TOOLS = {"calculator": Calculator()}


class _Search(Calculator):
    name = "search"
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


SEARCH = {"search": _Search()}


def test_hermes_several_calls_in_order():
    text = ('think <tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>\n'
            '<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"2*3\\"}"}\n</tool_call>')
    p = HermesParser().parse(text, TOOLS)
    assert p.kind == "tool_call"
    assert [c.arguments for c in p.calls] == [{"expression": "1+1"}, {"expression": "2*3"}]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("hello", "no tool call or answer"),
        ("<tool_call>{}", "not closed"),
        ("<tool_call>{nope}</tool_call>", "not valid JSON"),
        ('<tool_call>["calculator"]</tool_call>', "JSON object"),
        ('<tool_call>{"name": "calculator", "arguments": 3}</tool_call>', "arguments"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "JSON"),
    ],
)
def test_hermes_invalid_says_what_is_wrong_and_what_is_expected(text, problem):
    p = HermesParser().parse(text, TOOLS)
    assert p.kind == "invalid"
    assert problem in p.error
    assert "<tool_call>" in p.error and "<answer>" in p.error


def test_answer_first_wins_and_think_is_ignored():
    p = HermesParser().parse("<answer>4</answer><tool_call>{}</tool_call>", TOOLS)
    assert (p.kind, p.answer) == ("answer", "4")
    p = HermesParser().parse("<think><answer>wrong</answer></think><answer> 5 </answer>", TOOLS)
    assert (p.kind, p.answer) == ("answer", "5")
    p = HermesParser().parse('<tool_call>{"name": "calculator", "arguments": {}}</tool_call><answer>1</answer>', TOOLS)
    assert p.kind == "tool_call"


def test_answer_formats():
    assert find_answer("so #### 1,234\nthanks", ("hashes",)) == (3, "1,234")
    assert find_answer(r"thus \boxed{\frac{1}{2}}", ("boxed",))[1] == r"\frac{1}{2}"
    assert find_answer(r"\boxed{unclosed", ("boxed",)) is None
    assert find_answer("#### 3", ("tag",)) is None
    assert HermesParser(("tag", "hashes", "boxed")).parse(r"\boxed{42}", TOOLS).answer == "42"
    with pytest.raises(ConfigError):
        HermesParser(("latex",))


def test_tag_parser_search_r1():
    p = TagParser().parse("<think>hmm</think><search> who wrote X </search>", SEARCH)
    assert p.kind == "tool_call" and p.calls[0].arguments == {"query": "who wrote X"}
    p = TagParser().parse("<search>a</search><search>b</search>", SEARCH)
    assert [c.arguments["query"] for c in p.calls] == ["a", "b"]
    assert TagParser().parse("<search>open", SEARCH).kind == "invalid"
    assert TagParser().parse("<answer>x", SEARCH).error.startswith("Invalid action: an <answer> tag is not closed")
    assert TagParser().render_result("search", "doc") == "\n\n<information>doc</information>\n\n"


def test_command_parser():
    p = CommandParser().parse("search[red shoes]", SEARCH)
    assert (p.kind, p.verb, p.arg) == ("command", "search", "red shoes")
    p = CommandParser().parse("  Click[ Buy Now ] ", SEARCH)
    assert (p.verb, p.arg) == ("click", "Buy Now")
    assert CommandParser().parse("answer[42]", SEARCH).answer == "42"
    assert "empty" in CommandParser().parse("  ", SEARCH).error
    assert "malformed" in CommandParser().parse("search[a] click[b", SEARCH).error
    assert "verb[argument]" in CommandParser().parse("search red shoes", SEARCH).error


def test_make_parser_rejects_unknown_format():
    with pytest.raises(ConfigError, match="hermes"):
        make_parser("xml")
