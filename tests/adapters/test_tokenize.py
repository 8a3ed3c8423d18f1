"""Episode tokenization: exact agent ids, env text as chat-template suffixes, masks that cover exactly the actions."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.scratch import QWEN_CHAT_TEMPLATE
from agentgym_r1.error import ConfigError
from tests.adapters.scripted import ScriptedBackend


def _echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: what to echo
    """
    return text


TASKS = [{"prompt": "Say hi.", "answer": "hi"}, {"prompt": "Repeat: ünïcode ✓ <tag>", "answer": "x"}]
ENV_KWARGS = {"tools": [_echo], "tasks": TASKS}

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)
_special = st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_response>"])
_call = st.builds(lambda t: f"<tool_call>{json.dumps({'name': '_echo', 'arguments': {'text': t}})}</tool_call>", _text)
_action = st.one_of(
    _call,
    st.lists(_call, min_size=2, max_size=3).map("\n".join),
    st.builds(lambda t: f"<answer>{t}</answer>", _text),
    _text,
    st.lists(_special, min_size=1, max_size=4).map("".join),
    st.builds(lambda a, b, c: a + b + c, _text, _special, _text),
)
_turn = st.tuples(_action, st.booleans())
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # shrinking a whole episode takes minutes


def play(chat, script, **config):
    backend = ScriptedBackend(chat, lambda ctx, turn: script[min(turn, len(script) - 1)])
    sampling = SamplingParams(max_new_tokens=100_000)
    engine = RolloutEngine(backend, chat, RolloutConfig(max_context_tokens=100_000, sampling=sampling, **config))
    batch = engine.rollout([Prompt("AgentR1/ToolEnv-v0", ENV_KWARGS, seed=3, options={"index": 0})])
    engine.close()
    return batch, backend


def eos_text(chat):
    return chat.tokenizer.eos_token


def as_sampled(chat, script):
    """A sampler stops at its first end-of-turn token and samples at least one token."""
    stops = tuple(chat.tokenizer.decode([i]) for i in chat.stop_token_ids)
    return [(a + "." if a.endswith(stops) or not (a or e) else a, e) for a, e in script]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], phases=NO_SHRINK)
@given(script=st.lists(_turn, min_size=1, max_size=8))
def test_masked_tokens_decode_exactly_to_the_actions(chat, script):
    eos = eos_text(chat)
    script = as_sampled(chat, script)
    batch, backend = play(chat, script)
    (episode,) = batch.episodes
    (row,) = batch.samples
    decode = chat.tokenizer.decode
    assert len(row.completion_ids) == len(row.env_mask) == len(row.logprobs)
    assert [t.completion_ids for t in episode.turns] == backend.sent  # the sampled ids, untouched
    expected = []
    for i, turn in enumerate(episode.turns):
        action, with_eos = script[min(i, len(script) - 1)]
        assert decode(turn.completion_ids) == action + (eos if with_eos else "")
        assert turn.action == action
        expected.append(action + (eos if with_eos else ""))
    masked = [i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if m]
    assert decode(masked) == "".join(expected)
    # The env's transcript saw exactly these actions (its agent spans), in order.
    assert [m["content"] for m in episode.messages if m["role"] == "assistant"] == [t.action for t in episode.turns]
    assert sum(row.env_mask) == sum(len(t.completion_ids) for t in episode.turns)
    # Each step's reward sits on the last agent token of its turn.
    assert len(row.step_ends) == len(episode.turns) == len(row.step_rewards)
    for end in row.step_ends:
        assert row.env_mask[end] == 1 and (end + 1 == len(row.env_mask) or row.env_mask[end + 1] == 0)
    assert row.step_ends == sorted(set(row.step_ends))
    # Env logprobs are zero; agent logprobs are the sampler's.
    assert all(lp == 0.0 for lp, m in zip(row.logprobs, row.env_mask, strict=True) if not m)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], phases=NO_SHRINK)
@given(script=st.lists(_turn, min_size=1, max_size=8))
def test_the_sequence_is_the_chat_template_rendering_of_the_episode(chat, script):
    eos = eos_text(chat)
    script = as_sampled(chat, script)
    batch, _ = play(chat, script)
    (episode,) = batch.episodes
    (row,) = batch.samples
    last = max(i for i, m in enumerate(episode.messages) if m["role"] == "assistant")
    rendered = chat.render(episode.messages[: last + 1], add_generation_prompt=False)
    text = chat.tokenizer.decode(row.prompt_ids + row.completion_ids)
    # The template closes the last assistant turn with "<|im_end|>\n"; the model emitted "<|im_end|>" or not.
    closing = "\n" if episode.turns[-1].completion_ids[-1:] == [chat.tokenizer.eos_token_id] else eos + "\n"
    assert text + closing == rendered
    assert row.prompt_ids == chat.encode(chat.render(episode.messages[:2], add_generation_prompt=True))


def test_env_text_is_a_suffix_tokenized_once(chat):
    call = '<tool_call>{"name": "_echo", "arguments": {"text": "abc"}}</tool_call>'
    batch, _ = play(chat, [(call, True), (call, False), ("<answer>hi</answer>", True)])
    (episode,) = batch.episodes
    first, second, _ = episode.turns
    history = episode.messages[:3]
    assert first.env_ids == chat.encode(chat.suffix_text(history, episode.messages[3:4], first.completion_ids[-1]))
    # Ended by its own <|im_end|>: the suffix starts after it. Ended on a stop string: the template's <|im_end|> is
    # scaffolding, part of the env tokens.
    assert chat.tokenizer.decode(first.env_ids).startswith("\n<|im_start|>user\n<tool_response>\nabc\n")
    assert chat.tokenizer.decode(second.env_ids).startswith("<|im_end|>\n<|im_start|>user\n<tool_response>")
    assert episode.end_reason == "terminated" and episode.success


def test_consecutive_tool_results_share_one_user_turn(chat):
    calls = "\n".join(f'<tool_call>{{"name": "_echo", "arguments": {{"text": "{w}"}}}}</tool_call>' for w in "xy")
    batch, _ = play(chat, [(calls, True), ("<answer>hi</answer>", True)])
    env_text = chat.tokenizer.decode(batch.episodes[0].turns[0].env_ids)
    assert env_text == (
        "\n<|im_start|>user\n<tool_response>\nx\n</tool_response>\n<tool_response>\ny\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_step_layout_with_last_k_turns_renders_each_context(chat):
    call = '<tool_call>{"name": "_echo", "arguments": {"text": "abc"}}</tool_call>'
    batch, _ = play(
        chat, [(call, True), ("nonsense", True), (call, True), ("<answer>hi</answer>", True)], layout="step", context=1
    )
    (episode,) = batch.episodes
    assert len(batch.samples) == len(episode.turns) == 4
    assert {r.episode_id for r in batch.samples} == {episode.episode_id}
    msgs = episode.messages
    turn3 = batch.samples[3]
    assistants = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    expected = msgs[:2] + msgs[assistants[2] : assistants[3]]
    assert turn3.prompt_ids == chat.encode(chat.render(expected, add_generation_prompt=True))
    assert turn3.completion_ids == episode.turns[3].completion_ids and all(turn3.env_mask)
    assert [r.step_rewards[0] for r in batch.samples] == [t.reward for t in episode.turns]


def test_step_layout_with_full_history_uses_the_exact_prefix(chat):
    call = '<tool_call>{"name": "_echo", "arguments": {"text": "abc"}}</tool_call>'
    batch, _ = play(chat, [(call, False), ("<answer>hi</answer>", True)], layout="step")
    episode = batch.episodes[0]
    row = batch.samples[1]
    assert row.prompt_ids == episode.prompt_ids + episode.turns[0].completion_ids + episode.turns[0].env_ids


def test_summariser_context_is_rendered(chat):
    def summarise(messages):
        return [*messages[:2], {"role": "user", "content": f"{len(messages)} messages so far"}]

    batch, _ = play(chat, [("x", True), ("<answer>hi</answer>", True)], layout="step", context=summarise)
    assert "4 messages so far" in chat.tokenizer.decode(batch.samples[1].prompt_ids)


def test_concatenated_layout_refuses_a_partial_context():
    with pytest.raises(ConfigError, match="concatenated"):
        RolloutConfig(context=2)


def test_a_template_that_rewrites_assistant_content_is_refused(tokenizer):
    template = QWEN_CHAT_TEMPLATE.replace(
        "message['content'] + '<|im_end|>", "(message['content'] | upper) + '<|im_end|>"
    )
    with pytest.raises(ConfigError, match="cannot serve the rollout engine"):  # refused when built, before any rollout
        ChatTokenizer(tokenizer, chat_template=template)


class _PlainEnv(gym.Env):
    """A text env with no transcript: observations become user messages."""

    def __init__(self):
        self.observation_space = self.action_space = gym.spaces.Text(100)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "count to three", {}

    def step(self, action):
        self.t += 1
        return f"you said {action}", float(self.t == 3), self.t == 3, False, {}


def test_a_stop_token_outside_the_template_stays_before_the_closing(chat):
    """<|endoftext|> ends the turn (it is a stop id) but does not start the template's closing: both are kept."""
    batch, _ = play(chat, [("<answer>x", False), ("<answer>hi</answer>", True)])
    batch2, _ = play(chat, [("<answer>x<|endoftext|>", False), ("<answer>hi</answer>", True)])
    first, first2 = batch.episodes[0].turns[0], batch2.episodes[0].turns[0]
    assert first.action == first2.action == "<answer>x"
    assert chat.tokenizer.decode(first2.completion_ids[-1:]) == "<|endoftext|>"
    assert first.env_ids == first2.env_ids  # the closing <|im_end|> is template scaffolding in both


def test_envs_without_a_transcript_are_played_from_observations(chat):
    backend = ScriptedBackend(chat, lambda ctx, turn: (str(turn + 1), True))
    engine = RolloutEngine(backend, chat)
    batch = engine.rollout([Prompt(_PlainEnv)])
    (episode,) = batch.episodes
    assert [t.action for t in episode.turns] == ["1", "2", "3"] and episode.reward == 1.0
    assert "you said 2" in chat.tokenizer.decode(episode.turns[1].env_ids)


def test_qwen25_template_shipped_with_trl(tokenizer):
    """The real Qwen2.5 template (TRL's copy): the sequence is still the template's rendering of the episode."""
    trl_templates = pytest.importorskip("trl.chat_template_utils")
    chat = ChatTokenizer(tokenizer, chat_template=trl_templates.qwen2_5_chat_template)
    calls = "\n".join(f'<tool_call>{{"name": "_echo", "arguments": {{"text": "{w}"}}}}</tool_call>' for w in "xy")
    batch, _ = play(chat, [(calls, True), ("oops", False), ("<answer>hi</answer>", True)])
    (episode,), (row,) = batch.episodes, batch.samples
    rendered = chat.render(episode.messages, add_generation_prompt=False)
    assert chat.tokenizer.decode(row.prompt_ids + row.completion_ids) + "\n" == rendered
    assert chat.tokenizer.decode([i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if m]) == (
        calls + "<|im_end|>" + "oops" + "<answer>hi</answer><|im_end|>"
    )


def test_dense_step_rewards_sit_on_step_ends(chat):
    pytest.importorskip("torch")
    call = '<tool_call>{"name": "_echo", "arguments": {"text": "abc"}}</tool_call>'
    batch, _ = play(chat, [(call, True), ("junk", True), ("<answer>hi</answer>", True)])
    tensors = batch.to_tensors(chat.pad_token_id)
    (row,) = batch.samples
    dense = tensors["step_rewards"][0]
    assert dense.nonzero().flatten().tolist() == [e for e, r in zip(row.step_ends, row.step_rewards, strict=True) if r]
    assert dense.sum().item() == pytest.approx(sum(row.step_rewards)) and row.step_rewards[1] < 0 < row.step_rewards[2]
    assert tensors["prompt_mask"].sum().item() == len(row.prompt_ids)
