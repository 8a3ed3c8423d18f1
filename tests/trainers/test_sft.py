"""Expert episodes for the supervised warm start: GSM8K's expert by default, any env's actions when given."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters.tiny import play_expert, render_chat, train_tokenizer
from agentgym_r1.envs.gsm8k.expert import expert_actions
from agentgym_r1.trainers.sft import collate, expert_episode


def hotpot_actions(task) -> list[str]:
    """Search each supporting title (first entity, then the bridge; or the two compared), then answer."""
    answer = task.answer[0] if isinstance(task.answer, list) else task.answer
    return [f"<search>{t}</search>" for t in task.meta["supporting_titles"]] + [f"<answer>{answer}</answer>"]


def tokenizer_for(env, actions) -> object:
    texts = []
    for seed in range(5):
        play_expert(env, seed, actions)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    return train_tokenizer(texts, vocab_size=400, split_digits=True, cross_spaces=True)


def agent_text(demo, tokenizer) -> str:
    return tokenizer.decode([t for t, m in zip(demo.completion_ids, demo.env_mask, strict=True) if m])


def test_default_actions_are_gsm8k_expert():
    env = gym.make("AgentR1/GSM8K-v0", source="synthetic", min_steps=1, max_steps=1)
    tokenizer = tokenizer_for(env, expert_actions)
    demo = expert_episode(env, tokenizer, 3)
    env.reset(seed=3)
    assert demo.success
    assert agent_text(demo, tokenizer) == "<|im_end|>".join(expert_actions(env.unwrapped.task)) + "<|im_end|>"


def test_actions_callable_plays_another_env():
    """A multi-turn HotpotQA expert (search, search the bridge, answer): agent tokens are exactly its actions, the
    passages between them are env tokens (masked in the labels)."""
    env = gym.make("AgentR1/HotpotQA-v0", source="synthetic", parser="tag", top_k=1, system_prompt="Answer it.")
    tokenizer = tokenizer_for(env, hotpot_actions)
    demo = expert_episode(env, tokenizer, 0, hotpot_actions)
    env.reset(seed=0)
    actions = hotpot_actions(env.unwrapped.task)
    assert len(actions) == 3 and demo.success
    assert agent_text(demo, tokenizer) == "<|im_end|>".join(actions) + "<|im_end|>"
    env_text = tokenizer.decode([t for t, m in zip(demo.completion_ids, demo.env_mask, strict=True) if not m])
    assert f"(Title: {env.unwrapped.task.meta['supporting_titles'][1]})" in env_text  # the bridge passage
    labels = collate([demo], tokenizer.pad_token_id)["labels"][0]
    assert int((labels != -100).sum()) == sum(demo.env_mask)
