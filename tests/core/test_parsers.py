import gc
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgym_r1.core.fuzz import worst_shapes
from agentgym_r1.core.native import make_parser
from agentgym_r1.core.parsers import (
    CommandParser,
    CompositeParser,
    HermesParser,
    TagParser,
    find_answer,
)
from agentgym_r1.envs.alfworld.commands import read_action
from agentgym_r1.envs.gsm8k.calculator import Calculator
from agentgym_r1.error import ConfigError

TOOLS = {"calculator": Calculator()}


class _Search(Calculator):
    name = "search"
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


SEARCH = {"search": _Search()}


def test_hermes_several_calls_in_order():
    text = (
        'think <tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"2*3\\"}"}\n</tool_call>'
    )
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


# -- linear parsing: the worst shapes at the maximum action length, and hypothesis variants of them -------------------
MAX_ACTION = 100_000
PARSE_CPU_BOUND_S = 0.5  # generous: the quadratic parsers took 4 s to 100 s on these; the linear ones ~0.01-0.05 s
ALL_FORMATS = ("tag", "hashes", "boxed")


def _parsers():
    return [
        HermesParser(ALL_FORMATS),
        TagParser(ALL_FORMATS),
        CommandParser(ALL_FORMATS),
        CompositeParser([HermesParser(ALL_FORMATS), CommandParser(ALL_FORMATS)], "hint"),
    ]


def _cpu(fn, *args):
    """The parse's own CPU time: the cyclic collector is run first and paused while it parses, since a collection
    of the garbage earlier tests left in this process (0.9 s seen under pytest-xdist) is not the parser's cost."""
    gc.collect()
    was_on = gc.isenabled()
    gc.disable()
    try:
        start = time.thread_time()
        out = fn(*args)
        return time.thread_time() - start, out
    finally:
        if was_on:
            gc.enable()


@pytest.mark.parametrize("action", worst_shapes(MAX_ACTION), ids=lambda a: repr(a[:16]))
def test_worst_shapes_parse_in_bounded_time(action):
    for parser in _parsers():
        spent, parsed = _cpu(parser.parse, action, {**TOOLS, **SEARCH})
        assert parsed.kind in ("tool_call", "answer", "command", "invalid")
        assert spent < PARSE_CPU_BOUND_S, (parser.name, action[:30], spent)


shapes = st.builds(
    lambda opener, filler, reps, tail: (
        (opener + filler * reps) * (MAX_ACTION // max(1, len(opener) + len(filler) * reps)) + tail
    ),
    st.sampled_from(
        [
            "<tool_call>",
            "<answer>",
            "<think>",
            "\\boxed{",
            "<search>",
            "search[",
            "####",
            "{",
            "[",
            "a",
            "</answer><tool_call>",
            '<tool_call>{"name": "calculator", "arguments": {"e": ',
        ]
    ),
    st.sampled_from([" ", "\n", "1", "9", "{", "[", "]", " and then ", ", then ", ". a", "\t"]),
    st.integers(0, 50),
    st.sampled_from(["", "[x", "]", "</tool_call>", "</answer>", "}"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(action=shapes)
def test_hypothesis_shapes_parse_in_bounded_time(action):
    action = action[:MAX_ACTION]
    for parser in _parsers():
        spent, _ = _cpu(parser.parse, action, {**TOOLS, **SEARCH})
        assert spent < PARSE_CPU_BOUND_S, (parser.name, action[:30], spent)
    spent, _ = _cpu(read_action, action)
    assert spent < PARSE_CPU_BOUND_S, ("alfworld", action[:30], spent)


def test_a_huge_integer_in_a_tool_call_is_invalid_json_not_an_exception():
    p = HermesParser().parse("<tool_call>" + "1" * 4301 + "</tool_call>", TOOLS)
    assert p.kind == "invalid" and "not valid JSON" in p.error


def test_commands_read_as_before():
    p = CommandParser().parse("  Search  [ red shoes ] ", TOOLS)
    assert (p.kind, p.verb, p.arg) == ("command", "search", "red shoes")
    assert CommandParser().parse("click[a[b]]", TOOLS).arg == "a[b]"
    assert CommandParser().parse("answer[42]", TOOLS).answer == "42"
    assert CommandParser().parse("a" + " " * 1000 + "[x", TOOLS).kind == "invalid"
    assert CommandParser().parse("1bad[x]", TOOLS).kind == "invalid"


def test_composite_reads_each_format_once_and_ends_errors_with_its_own_hint():
    both = CompositeParser([HermesParser(()), CommandParser((), answer_verb=None)], "Write click[button].")
    assert both.parse('<tool_call>{"name": "click", "arguments": {"button": "x"}}</tool_call>', {}).kind == "tool_call"
    assert both.parse("click[x]", {}).verb == "click"
    bad = both.parse("<tool_call>{", {})
    assert bad.kind == "invalid" and bad.error.endswith("Write click[button].") and "not closed" in bad.error
    assert "answer[" not in both.parse("nothing", {}).error


def test_boxed_takes_the_last_balanced_one():
    assert find_answer(r"\boxed{1} then \boxed{{2}} \boxed{", ("boxed",)) == (15, "{2}")
