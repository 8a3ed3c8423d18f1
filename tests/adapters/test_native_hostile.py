"""``parser="auto"`` on hostile model text, in every registered env: a shape a family's reader cannot read is an
invalid action (error observation, format penalty, the episode goes on), never an exception out of ``step``; and a
step reads its action once, whichever env reads it and however the parse fails."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentgym_r1.core.native import NativeParser, read_any, read_hermes
from tests.conftest import ALL_ENV_IDS, make_env

pytest.importorskip("trl")
pytest.importorskip("transformers")

from tests.adapters.test_families import TEMPLATES

# Each shape raised out of step() before: an IndexError in the documented gpt-oss reader (parser="auto" outside the
# engine), an AttributeError in the response-template reader of the Qwen families (a JSON value that is no object
# where the call goes).
GPT_OSS_NO_NAME = "to=functions.<|channel|>commentary json<|message|>{}<|call|>"
NOT_AN_OBJECT = ['<tool_call>"str"</tool_call>', "<tool_call>true</tool_call>", "<tool_call>1e999</tool_call>"]
QWEN_TEMPLATES = ["qwen2_5", "qwen3", "qwen3_vl"]


def _native(tokenizer, name: str) -> NativeParser:
    from agentgym_r1.adapters.native import native_parser
    from agentgym_r1.adapters.scratch import family_tokenizer
    from agentgym_r1.adapters.tokenize import ChatTokenizer

    return native_parser(ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name])))


def _steps_invalid(env: gym.Env, actions: list[str]) -> None:
    env.reset(seed=0)
    for action in actions:
        obs, reward, terminated, _, info = env.step(action)
        assert not info["valid"] and "Invalid action" in info["error"] and info["error"] in obs, (action, info)
        assert info["reward_parts"]["format"] < 0 and not terminated  # the episode goes on
    _, _, _, _, info = env.step("<answer>1</answer>")  # and the episode goes on to the next action
    assert info["turn"] == len(actions)


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_a_gpt_oss_call_without_a_name_is_an_invalid_action(env_id):
    env = make_env(env_id, parser="auto")
    _steps_invalid(env, [GPT_OSS_NO_NAME, GPT_OSS_NO_NAME.replace("{}", '{"command": "look"}')])
    env.close()


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
@pytest.mark.parametrize("name", QWEN_TEMPLATES)
def test_a_qwen_call_that_is_no_json_object_is_an_invalid_action(tokenizer, env_id, name):
    env = make_env(env_id, parser=_native(tokenizer, name))
    _steps_invalid(env, NOT_AN_OBJECT)
    env.close()


# -- one reading per step --------------------------------------------------------------------------------------------
class CountingReader:
    """A real reader (``read``) that counts how often a step runs it."""

    def __init__(self, read) -> None:
        self.read, self.calls = read, 0

    def __call__(self, text: str):
        self.calls += 1
        return self.read(text)


ACTIONS = [
    '<tool_call>{"name": "act", "arguments": {"command": "look"}}</tool_call>',  # a call (to a tool the env may lack)
    '<tool_call>{"name": "act", "arguments": {"command": </tool_call>',  # a malformed call
    "<tool_call>" + "x" * 1000,  # an unclosed call
    "search[shoes]",  # a plain command (WebShop and ALFWorld read the text as one when no call claims it)
    "look",
]


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
@pytest.mark.parametrize("read", [read_hermes, read_any])
def test_each_step_reads_its_action_once(env_id, read):
    reader = CountingReader(read)
    env = make_env(env_id, parser=NativeParser("hermes", reader))
    env.reset(seed=0)
    for i, action in enumerate(ACTIONS, 1):
        _, _, terminated, truncated, _ = env.step(action)
        assert reader.calls == i, (action, reader.calls)
        assert not (terminated or truncated)
    env.close()


def test_gemma4_s_failed_parse_is_one_pass_and_llama_s_open_call_still_closes(tokenizer, monkeypatch):
    """Gemma 4's end-of-turn tokens close no call, so an unclosed call is parsed once, not once more per token;
    Llama's ``}<|eot_id|>`` does close one, so a call whose ``<|eot_id|>`` was cut as the stop token still reads."""
    from transformers.utils.chat_parsing import ResponseParser

    passes = []
    init = ResponseParser.__init__

    def counted(self, *args, **kwargs):
        passes.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(ResponseParser, "__init__", counted)
    gemma = make_env("AgentR1/ALFWorld-v1", parser=_native(tokenizer, "gemma4"))
    gemma.reset(seed=0)
    _, _, _, _, info = gemma.step('<|tool_call>call:act{command:<|"|>look' + "a" * 20_000)
    assert not info["valid"] and "could not be parsed" in info["error"]
    assert len(passes) == 1
    _, _, _, _, info = gemma.step('<|tool_call>call:act{command:<|"|>look<|"|>}<tool_call|>')
    assert info["valid"], info["error"]
    gemma.close()

    llama = make_env("AgentR1/ALFWorld-v1", parser=_native(tokenizer, "llama3_1"))
    llama.reset(seed=0)
    passes.clear()
    _, _, _, _, info = llama.step('{"name": "act", "parameters": {"command": "look"}}')
    assert info["valid"], info["error"]
    assert len(passes) == 2  # alone, then with <|eot_id|>
    llama.close()


@pytest.mark.parametrize("marker", ["<turn|>", "<|tool_response>", "<eos>", "<tool_call|>", "<channel|>"])
def test_gemma4_s_delimiters_written_in_patterns_are_capped_too(tokenizer, marker):
    """Gemma 4's delimiters written inside its regex patterns (the end of content
    ``(?:<turn\\|>|<\\|tool_response>|<eos>)`` among them) count against the marker cap like literal ones: 14,000
    ``<turn|>`` closed 14,000 regions, 120 ms of one step."""
    from agentgym_r1.adapters.tokenize import MAX_MARKERS

    parser = _native(tokenizer, "gemma4")
    crowded = parser.parse(marker * (MAX_MARKERS + 1), {})
    assert crowded.kind == "invalid" and f"at most {MAX_MARKERS}" in crowded.error, crowded
    assert f"at most {MAX_MARKERS}" not in (parser.parse(marker * 8, {}).error or "")
