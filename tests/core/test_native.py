"""The families' documented tool-call formats, read without a tokenizer (parser="auto" outside the engine)."""

from __future__ import annotations

import pytest

from agentgym_r1.core.native import (
    NativeParser,
    make_parser,
    read_deepseek,
    read_gpt_oss,
    read_llama,
    read_mistral,
)
from agentgym_r1.core.parsers import ToolCall

ECHO = ToolCall("echo", {"text": "abc"})
DS = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>echo\n```json\n{}\n```"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
)


@pytest.mark.parametrize(
    ("reader", "text", "calls"),
    [
        (read_llama, '{"name": "echo", "parameters": {"text": "abc"}}', [ECHO]),
        (read_llama, '<|python_tag|>{"name": "echo", "arguments": {"text": "abc"}}', [ECHO]),
        (read_llama, "just words", []),
        (
            read_mistral,
            '[TOOL_CALLS][{"name": "echo", "arguments": {"text": "abc"}}, {"name": "echo", "arguments": {}}]</s>',
            [ECHO, ToolCall("echo", {})],
        ),
        (read_mistral, '[TOOL_CALLS]echo[ARGS]{"text": "abc"}[TOOL_CALLS]echo[ARGS]{}', [ECHO, ToolCall("echo", {})]),
        (
            read_gpt_oss,
            "<|channel|>analysis<|message|>hm<|end|><|start|>assistant to=functions.echo<|channel|>commentary "
            'json<|message|>{"text": "abc"}<|call|>',
            [ECHO],
        ),
        (read_gpt_oss, '<|channel|>commentary to=functions.echo <|constrain|>json<|message|>{"text": "abc"}', [ECHO]),
        (read_deepseek, DS.replace("{}", '{"text": "abc"}'), [ECHO]),
    ],
)
def test_documented_formats_are_read(reader, text, calls):
    assert reader(text) == (calls, None)


@pytest.mark.parametrize(
    ("reader", "text", "problem"),
    [
        (read_llama, '{"name": "echo", "parameters": {"text": "abc}', "not valid JSON"),
        (read_mistral, '[TOOL_CALLS][{"name": "echo", "arguments": {"text": "abc"}', "not valid JSON"),
        (read_mistral, "[TOOL_CALLS]echo", "no [ARGS]"),
        (read_gpt_oss, "to=functions.echo<|channel|>commentary json", "no <|message|>"),
        (
            read_gpt_oss,
            '<|start|>assistant to=functions.echo<|channel|>commentary json<|message|>{"text": <|call|>',
            "not valid JSON",
        ),
        (read_deepseek, DS.replace("<｜tool▁call▁end｜>", ""), "is not closed"),
        (read_deepseek, DS.replace("{}", "[1]"), "must be a JSON object"),
    ],
)
def test_malformed_native_calls_name_the_problem(reader, text, problem):
    calls, found = reader(text)
    assert calls == [] and problem in found


def test_parser_auto_outside_the_engine_reads_any_documented_format():
    parser = make_parser("auto")
    assert isinstance(parser, NativeParser)
    assert parser.parse('[TOOL_CALLS][{"name": "echo", "arguments": {"text": "abc"}}]', {}).calls == [ECHO]
    assert parser.parse('<tool_call>{"name": "echo", "arguments": {"text": "abc"}}</tool_call>', {}).calls == [ECHO]
    assert parser.parse("<answer>42</answer>", {}).answer == "42"
    bad = parser.parse('{"name": "echo", "parameters": {', {})
    assert bad.kind == "invalid" and "not valid JSON" in bad.error and "<answer>" in bad.error


def test_a_malformed_native_call_gets_the_env_s_error_and_format_penalty():
    import gymnasium as gym

    def echo(text: str) -> str:
        """Echo.

        Args:
            text: what to echo
        """
        return text

    env = gym.make("AgentR1/ToolEnv-v0", tools=[echo], tasks=[{"prompt": "p", "answer": "abc"}], parser="auto")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step('[TOOL_CALLS][{"name": "echo", "arguments": {"text": "abc"}')
    assert not terminated and not info["valid"] and info["reward_parts"]["format"] < 0 and "Invalid action" in obs
    obs, _, _, _, info = env.step('[TOOL_CALLS][{"name": "echo", "arguments": {"text": "abc"}}]')
    assert info["valid"] and "abc" in obs
