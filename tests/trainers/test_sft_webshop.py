"""Expert episodes of another env for the supervised warm start: WebShop's several clicks, played from an actions
callable (``expert_episode(..., actions)``), tokenized as the rollout engine does."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters.tiny import play_expert, render_chat, train_tokenizer
from agentgym_r1.leaderboard.baselines.webshop import RuleShopperPolicy
from agentgym_r1.trainers.sft import collate, expert_episode

KWARGS = {"source": "generated", "num_products": 200, "system_prompt": "Buy it."}


def shopper_actions(task) -> list[str]:
    """The rule shopper's actions on ``task``, found by playing it in an env of its own."""
    env, policy, actions = gym.make("AgentR1/WebShop-v0", **KWARGS), RuleShopperPolicy(), []
    obs, info = env.reset(options={"task_id": task.id})
    policy.reset(env, obs, info)
    for _ in range(10):
        actions.append(policy.act(obs, info))
        obs, _, terminated, truncated, info = env.step(actions[-1])
        if terminated or truncated:
            break
    return actions


def test_actions_callable_plays_webshop_clicks():
    env = gym.make("AgentR1/WebShop-v0", **KWARGS)
    texts = []
    for seed in range(3):
        play_expert(env, seed, shopper_actions)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    tokenizer = train_tokenizer(texts, vocab_size=400, cross_spaces=True)
    demo = expert_episode(env, tokenizer, 0, shopper_actions)
    env.reset(seed=0)
    actions = shopper_actions(env.unwrapped.task)
    assert len(actions) >= 3 and actions[0].startswith("search[") and actions[-1] == "click[buy now]"
    assert demo.success
    agent = tokenizer.decode([t for t, m in zip(demo.completion_ids, demo.env_mask, strict=True) if m])
    assert agent == "<|im_end|>".join(actions) + "<|im_end|>"
    env_text = tokenizer.decode([t for t, m in zip(demo.completion_ids, demo.env_mask, strict=True) if not m])
    assert "Available actions: click[back to search]" in env_text  # the pages are env tokens, masked
    labels = collate([demo], tokenizer.pad_token_id)["labels"][0]
    assert int((labels != -100).sum()) == sum(demo.env_mask)
