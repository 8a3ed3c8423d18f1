"""WebShop and ALFWorld with ``parser="auto"``: a model of each family calls their tools in its own format through
the rollout engine; a malformed native call is an invalid action (error observation, format penalty) and the
episode goes on; masks exact."""

from __future__ import annotations

import pytest

from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.core.native import NativeParser
from agentgym_r1.error import ConfigError
from tests.adapters.scripted import ScriptedBackend

pytest.importorskip("trl")
pytest.importorskip("transformers")

from tests.adapters.test_families import BROKEN, NATIVE_CALLS, TEMPLATES

FAMILIES = ["qwen2_5", "llama3_1", "gptoss", "deepseekv3"]  # a response-template reader each, and a documented one


def _call(call: str, tool: str, arg: str, value: str) -> str:
    """The family's call to ``_echo(text="abc")`` (from test_families) rewritten as ``tool(arg=value)``."""
    return call.replace("_echo", tool).replace("text", arg).replace("abc", value)


def _play(tokenizer, name: str, env_id: str, kwargs: dict, script: list[tuple[str, bool]], env_backend: str = "thread"):
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    end_id = chat.tokenizer.convert_tokens_to_ids(chat.family.end_of_turn[0])
    backend = ScriptedBackend(chat, lambda ctx, turn: script[turn], end_id=end_id)
    engine = RolloutEngine(
        backend,
        chat,
        RolloutConfig(
            max_turns=len(script),
            env_backend=env_backend,
            env_workers=1,
            sampling=SamplingParams(max_new_tokens=10_000),
        ),
    )
    try:
        batch = engine.rollout([Prompt(env_id, {**kwargs, "parser": "auto"}, seed=0, options={"index": 0})])
    finally:
        engine.close()
    (episode,), (row,) = batch.episodes, batch.samples
    masked = [i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if m]
    assert masked == [i for turn in episode.turns for i in turn.completion_ids]
    assert len(episode.turns) == len(script) and episode.end_reason == "max_turns"
    return chat, episode


def _check(chat, episode, needle: str) -> None:
    call, bad, last = episode.turns
    system = episode.messages[0]["content"]  # the prompt shows the family's way of calling, not Hermes tags
    assert "<tool_call>{" not in system and ("in your own tool-call format" in system or "function" in system)
    assert call.valid, call.error
    assert needle in chat.tokenizer.decode(call.env_ids)  # the env ran the call and answered it as the tool
    roles = [m["role"] for m in episode.messages]
    assert roles[roles.index("assistant") + 1] == "tool", roles
    assert not bad.valid and bad.reward_parts["format"] < 0, bad.error
    assert "Invalid action" in chat.tokenizer.decode(bad.env_ids)
    assert last.valid, last.error  # the episode went on after the malformed call


# every family on threads; a response-template reader and a documented one in an env worker process as well (the
# family's parser is pickled into the worker with the env's options)
CASES = [(name, "thread") for name in FAMILIES] + [("qwen2_5", "process"), ("llama3_1", "process")]


@pytest.mark.parametrize(("name", "env_backend"), CASES)
def test_webshop_reads_the_family_s_own_tool_calls(tokenizer, name, env_backend):
    call = NATIVE_CALLS[name]
    broken = BROKEN[name][0]
    script = [
        (_call(call, "search", "query", "shoes"), False),
        (_call(broken, "click", "button", "x"), False),
        (_call(call, "click", "button", "back to search"), False),
    ]
    chat, episode = _play(tokenizer, name, "AgentR1/WebShop-v0", {"num_products": 50}, script, env_backend)
    _check(chat, episode, "Back to Search")


@pytest.mark.parametrize(("name", "env_backend"), CASES)
def test_alfworld_reads_the_family_s_own_tool_calls(tokenizer, name, env_backend, tmp_path):
    pytest.importorskip("textworld")
    call = NATIVE_CALLS[name]
    broken = BROKEN[name][0]
    script = [
        (_call(call, "act", "command", "look"), False),
        (_call(broken, "act", "command", "look"), False),
        (_call(call, "act", "command", "inventory"), False),
    ]
    kwargs = {"num_games": 1, "cache_dir": str(tmp_path)}
    chat, episode = _play(tokenizer, name, "AgentR1/ALFWorld-v1", kwargs, script, env_backend)
    _check(chat, episode, "You are")


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "search", "parameters": {"query": "shoes"}}',
        '[TOOL_CALLS][{"name": "search", "arguments": {"query": "shoes"}}]',
    ],
)
def test_webshop_auto_outside_the_engine_reads_any_documented_format(text):
    import gymnasium as gym

    env = gym.make("AgentR1/WebShop-v0", num_products=50, parser="auto").unwrapped
    assert isinstance(env.tool_parser, NativeParser)
    env.reset(seed=0)
    _, _, _, _, info = env.step(text)
    assert info["action"]["kind"] == "tool_call" and env.session.page == "results"
    _, _, _, _, info = env.step("click[back to search]")  # plain commands are still read as commands
    assert info["action"]["kind"] == "command" and env.session.page == "search"


def test_an_unknown_parser_name_fails_before_any_work():
    import gymnasium as gym

    with pytest.raises(ConfigError, match="unknown action format 'json'"):
        gym.make("AgentR1/WebShop-v0", parser="json")
    pytest.importorskip("textworld")
    with pytest.raises(ConfigError, match="unknown action format 'json'"):
        gym.make("AgentR1/ALFWorld-v1", parser="json")


def test_the_prompts_show_a_call_in_the_parser_s_format():
    import gymnasium as gym

    from agentgym_r1.adapters.native import EXAMPLES
    from agentgym_r1.core.native import read_llama
    from agentgym_r1.envs.webshop.env import SYSTEM_PROMPT

    llama = NativeParser("llama3", read_llama, example=EXAMPLES["llama3"])
    env = gym.make("AgentR1/WebShop-v0", num_products=50, parser=llama).unwrapped
    assert '{"name": "click", "parameters": {"button": "buy now"}}' in env.system_prompt
    assert "<tool_call>" not in env.system_prompt
    env.reset(seed=0)
    obs, reward, _, _, info = env.step('{"name": "click", "parameters": {"button": "x}')  # broken JSON
    assert info["action"]["kind"] == "invalid" and reward < 0
    assert '{"name": "click", "parameters": {"button": "..."}}' in str(obs)  # the hint shows the family's call
    assert gym.make("AgentR1/WebShop-v0", num_products=50).unwrapped.system_prompt == SYSTEM_PROMPT  # unchanged
