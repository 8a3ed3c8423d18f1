"""Supervised warm start on expert episodes, tokenized exactly as rollouts are (loss on agent tokens only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch

from agentgym_r1.adapters import ChatTokenizer
from agentgym_r1.error import ConfigError


@dataclass
class Demo:
    """One expert episode as a training row: the agent's ids (end-of-turn token included) have ``env_mask`` 1."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    success: bool = False


def policy_actions(env: gym.Env, policy: Any, max_turns: int) -> Callable[[Any], list[str]]:
    """An ``actions`` callable for :func:`expert_episode` from a deterministic :class:`~agentgym_r1.leaderboard.
    policies.Policy` (a scripted baseline such as WebShop's rule shopper): it plays ``policy`` on the task (found by
    its id) in ``env``, an env of its own, not the one the episode is recorded in, for at most ``max_turns`` steps,
    and returns the actions it took."""
    if max_turns < 1:
        raise ConfigError(f"policy_actions needs max_turns >= 1, got {max_turns}")

    def actions(task: Any) -> list[str]:
        taken: list[str] = []
        obs, info = env.reset(options={"task_id": task.id})
        policy.reset(env, obs, info)
        for _ in range(max_turns):
            taken.append(policy.act(obs, info))
            obs, _, terminated, truncated, info = env.step(taken[-1])
            if terminated or truncated:
                break
        return taken

    return actions


def expert_episode(env: gym.Env, tokenizer: Any, seed: int, actions: Callable[[Any], Sequence[str]]) -> Demo:
    """Play ``actions(task)`` (the env's expert, given by the caller: e.g. GSM8K's
    :func:`agentgym_r1.envs.gsm8k.expert.expert_actions`) in ``env`` and tokenize the episode exactly as the rollout
    engine does."""
    chat = ChatTokenizer(tokenizer)
    env.reset(seed=seed)
    demo = Demo(chat.prompt_ids(env.unwrapped.transcript.messages()))
    for action in actions(env.unwrapped.task):
        ids = [*chat.encode(action), tokenizer.eos_token_id]
        demo.completion_ids += ids
        demo.env_mask += [1] * len(ids)
        n_before = len(env.unwrapped.transcript.messages())
        _, _, terminated, truncated, info = env.step(action)
        demo.success = bool(info["success"])
        if terminated or truncated:
            break
        messages = env.unwrapped.transcript.messages()
        suffix = chat.suffix_ids(messages[: n_before + 1], messages[n_before + 1 :], tokenizer.eos_token_id)
        demo.completion_ids += suffix
        demo.env_mask += [0] * len(suffix)
    return demo


def collate(episodes: Sequence[Demo], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 off agent tokens)."""
    rows = [e.prompt_ids + e.completion_ids for e in episodes]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for b, (e, r) in enumerate(zip(episodes, rows, strict=True)):
        ids[b, : len(r)] = torch.tensor(r)
        attn[b, : len(r)] = 1
        comp = torch.tensor(e.completion_ids)
        labels[b, len(e.prompt_ids) : len(r)] = torch.where(torch.tensor(e.env_mask).bool(), comp, -100)
    return {"input_ids": ids, "attention_mask": attn, "labels": labels}


def sft(
    model: Any,
    episodes: Sequence[Demo],
    pad_id: int,
    *,
    steps: int,
    batch_size: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Fine-tune ``model`` on ``episodes`` for ``steps`` AdamW steps; returns the losses."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    model.train()
    losses = []
    for step in range(steps):
        idx = torch.randint(len(episodes), (batch_size,), generator=gen).tolist()
        loss = model(**collate([episodes[i] for i in idx], pad_id)).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, losses[-1])
    return losses
