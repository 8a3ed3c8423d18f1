"""The trainers' side of the rollout engine: play resets with a transformers model, get training rows back.

The episodes are played by :class:`agentgym_r1.adapters.RolloutEngine` with its transformers backend (exact sampled
ids, chat-template suffixes for env text, ``env_mask``). This module only adapts its output to what the trainers
read: per row the prompt and completion ids, the agent mask, each step's last-token index, reward and process
reward, and the episode's reward and success.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agentgym_r1.adapters import ChatTokenizer, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.hf import HFBackend


@dataclass
class Episode:
    """One concatenated training row with the episode's per-step rewards."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    step_ends: list[int]
    step_rewards: list[float]
    step_process: list[float]
    reward: float
    success: bool
    invalid: int
    end: str
    actions: list[str]

    @property
    def turns(self) -> int:
        return len(self.step_ends)


def play(model: Any, tokenizer: Any, make_env: Callable[[], gym.Env], resets: Sequence[dict[str, Any]], *,
         max_turns: int = 4, max_new_tokens: int = 48, max_completion_tokens: int = 512, temperature: float = 1.0,
         greedy: bool = False) -> list[Episode]:
    """One episode per entry of ``resets`` (``{"seed": ..., "options": ...}``), in order, generation batched."""
    chat = ChatTokenizer(tokenizer)
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0 if greedy else temperature)
    width = max_completion_tokens + 1024  # the engine's limit is on the whole context
    config = RolloutConfig(samples_per_prompt=1, max_context_tokens=width, max_turns=max_turns, sampling=sampling,
                           seed=None)
    was_training = model.training
    model.eval()
    try:
        batch = RolloutEngine(HFBackend(model, chat), chat, config).rollout(
            [{"env": make_env, "seed": r.get("seed"), "options": r.get("options")} for r in resets])
    finally:
        model.train(was_training)
    out = []
    for ep, row in zip(batch.episodes, batch.samples, strict=True):
        n = len(row.completion_ids)
        cut = min(n, max_completion_tokens)
        out.append(Episode(
            row.prompt_ids, row.completion_ids[:cut], row.env_mask[:cut], row.logprobs[:cut],
            [e for e in row.step_ends if e < cut], row.step_rewards[: sum(e < cut for e in row.step_ends)],
            [t.reward_parts.get("process", 0.0) for t in ep.turns][: sum(e < cut for e in row.step_ends)],
            ep.reward, ep.success, sum(not t.valid for t in ep.turns), ep.end_reason + (" (cut)" if cut < n else ""),
            [t.action for t in ep.turns]))
    return out
