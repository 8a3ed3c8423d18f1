"""Expert episodes for the supervised warm start: GSM8K's expert by default, any env's actions when given
(HotpotQA's searches, WebShop's several clicks), tokenized as the rollout engine does."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters.scratch import play_expert, render_chat, train_tokenizer
from agentgym_r1.envs.gsm8k.expert import expert_actions
from agentgym_r1.error import ConfigError
from agentgym_r1.leaderboard.baselines.hotpotqa import supporting_titles
from agentgym_r1.leaderboard.baselines.webshop import RuleShopperPolicy
from agentgym_r1.trainers.sft import collate, expert_episode, policy_actions

WEBSHOP = {"source": "generated", "num_products": 200, "system_prompt": "Buy it."}


def hotpot_actions(task) -> list[str]:
    """Search each supporting title (first entity, then the bridge; or the two compared), then answer."""
    answer = task.answer[0] if isinstance(task.answer, list) else task.answer
    return [f"<search>{t}</search>" for t in supporting_titles(task.meta)] + [f"<answer>{answer}</answer>"]


def shopper_actions(task) -> list[str]:
    """The rule shopper's actions on ``task``, found by playing it in an env of its own."""
    return policy_actions(gym.make("AgentR1/WebShop-v0", **WEBSHOP), RuleShopperPolicy(), 10)(task)


def tokenizer_for(env, actions, seeds: int = 5, split_digits: bool = True) -> object:
    texts = []
    for seed in range(seeds):
        play_expert(env, seed, actions)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    return train_tokenizer(texts, vocab_size=400, split_digits=split_digits, cross_spaces=True)


def agent_text(demo, tokenizer) -> str:
    return tokenizer.decode([t for t, m in zip(demo.completion_ids, demo.env_mask, strict=True) if m])


def env_text(demo, tokenizer) -> str:
    return tokenizer.decode([t for t, m in zip(demo.completion_ids, demo.env_mask, strict=True) if not m])


def labelled_tokens(demo, tokenizer) -> int:
    return int((collate([demo], tokenizer.pad_token_id)["labels"][0] != -100).sum())


def test_default_actions_are_gsm8k_expert():
    env = gym.make("AgentR1/GSM8K-v0", source="synthetic", min_steps=1, max_steps=1)
    tokenizer = tokenizer_for(env, expert_actions)
    demo = expert_episode(env, tokenizer, 3, expert_actions)
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
    assert f"(Title: {env.unwrapped.task.meta['supporting_titles'][1]})" in env_text(demo, tokenizer)  # the bridge
    assert labelled_tokens(demo, tokenizer) == sum(demo.env_mask)


def test_actions_callable_plays_webshop_clicks():
    env = gym.make("AgentR1/WebShop-v0", **WEBSHOP)
    tokenizer = tokenizer_for(env, shopper_actions, seeds=3, split_digits=False)
    demo = expert_episode(env, tokenizer, 0, shopper_actions)
    env.reset(seed=0)
    actions = shopper_actions(env.unwrapped.task)
    assert len(actions) >= 3 and actions[0].startswith("search[") and actions[-1] == "click[buy now]"
    assert demo.success
    assert agent_text(demo, tokenizer) == "<|im_end|>".join(actions) + "<|im_end|>"
    assert "Available actions: click[back to search]" in env_text(demo, tokenizer)  # the pages are env tokens
    assert labelled_tokens(demo, tokenizer) == sum(demo.env_mask)


def test_policy_actions_refuses_no_turns():
    with pytest.raises(ConfigError, match="max_turns >= 1, got 0"):
        policy_actions(gym.make("AgentR1/WebShop-v0", **WEBSHOP), RuleShopperPolicy(), 0)


def test_policy_actions_stops_at_max_turns():
    env = gym.make("AgentR1/WebShop-v0", **WEBSHOP)
    env.reset(seed=0)
    task = env.unwrapped.task
    full = policy_actions(gym.make("AgentR1/WebShop-v0", **WEBSHOP), RuleShopperPolicy(), 10)(task)
    cut = policy_actions(gym.make("AgentR1/WebShop-v0", **WEBSHOP), RuleShopperPolicy(), 2)(task)
    assert len(full) >= 3 and cut == full[:2]
