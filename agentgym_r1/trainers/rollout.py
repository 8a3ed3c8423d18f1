"""Playing a batch of text envs with a transformers model, turn by turn, into token-exact training records.

Each episode is one sequence: ``prompt_ids`` (the chat template over the first messages, ending in the assistant
header), then for every turn the ids the model sampled (up to and including its end-of-turn token, ``env_mask`` 1)
followed by the environment's reply rendered through the chat template as a suffix (``env_mask`` 0). Agent tokens are
never decoded and re-encoded: the decoded text goes to the env, the sampled ids go to the trainer.

Generation is batched across all live episodes with left padding. An episode ends when the env terminates or
truncates, at ``max_turns``, or when its completion would pass ``max_completion_tokens`` (recorded in ``end``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch


@dataclass
class Episode:
    """One played episode in token form, with what the trainer and the logs need."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    step_ends: list[int] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    step_process: list[float] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    invalid: int = 0
    end: str = ""
    actions: list[str] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.step_ends)


def env_suffix_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The ids that follow the agent's end-of-turn token: the env's messages and the next assistant header."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer("\n" + text, add_special_tokens=False)["input_ids"]


def prompt_ids_for(tokenizer: Any, env: gym.Env) -> list[int]:
    text = tokenizer.apply_chat_template(env.unwrapped.transcript.messages(), tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def _generate(model: Any, tokenizer: Any, contexts: list[list[int]], max_new_tokens: int, temperature: float,
              greedy: bool) -> tuple[list[list[int]], list[list[float]]]:
    """Sample one turn for each context; returns the new ids (through eos) and their logprobs."""
    width = max(len(c) for c in contexts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts])
    attn = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens, do_sample=not greedy,
                         temperature=temperature if not greedy else None, top_k=0, top_p=1.0,
                         output_scores=True, return_dict_in_generate=True, pad_token_id=pad,
                         eos_token_id=tokenizer.eos_token_id)
    new = out.sequences[:, width:]
    logps = torch.stack(out.scores, dim=1).float().log_softmax(-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    gens, lps = [], []
    for row, lp in zip(new.tolist(), logps.tolist(), strict=True):
        n = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        gens.append(row[:n])
        lps.append(lp[:n])
    return gens, lps


def play(model: Any, tokenizer: Any, make_env: Callable[[], gym.Env], resets: Sequence[dict[str, Any]], *,
         max_turns: int = 4, max_new_tokens: int = 48, max_completion_tokens: int = 512, temperature: float = 1.0,
         greedy: bool = False) -> list[Episode]:
    """Play one episode per entry of ``resets`` (``{"seed": ..., "options": ...}``), generation batched across all."""
    was_training = model.training
    model.eval()
    envs = [make_env() for _ in resets]
    episodes = []
    for env, r in zip(envs, resets, strict=True):
        env.reset(seed=r.get("seed"), options=r.get("options"))
        episodes.append(Episode(prompt_ids_for(tokenizer, env)))
    live = list(range(len(envs)))
    for turn in range(max_turns):
        if not live:
            break
        contexts = [episodes[i].prompt_ids + episodes[i].completion_ids for i in live]
        gens, lps = _generate(model, tokenizer, contexts, max_new_tokens, temperature, greedy)
        still = []
        for i, gen, lp in zip(live, gens, lps, strict=True):
            if _advance(envs[i], episodes[i], tokenizer, gen, lp, turn == max_turns - 1, max_completion_tokens):
                still.append(i)
        live = still
    for env in envs:
        env.close()
    model.train(was_training)
    return episodes


def _advance(env: gym.Env, ep: Episode, tokenizer: Any, gen: list[int], lp: list[float], last_turn: bool,
             max_completion_tokens: int) -> bool:
    """Apply one sampled turn to ``env`` and ``ep``; True while the episode goes on."""
    action = tokenizer.decode(gen, skip_special_tokens=True)
    ep.actions.append(action)
    ep.completion_ids += gen
    ep.env_mask += [1] * len(gen)
    ep.logprobs += lp
    ep.step_ends.append(len(ep.completion_ids) - 1)
    try:
        n_before = len(env.unwrapped.transcript.messages())
        _, reward, terminated, truncated, info = env.step(action)
    except Exception as e:  # an env that raises ends its own episode, never the batch
        ep.step_rewards.append(0.0)
        ep.step_process.append(0.0)
        ep.end = f"env error: {type(e).__name__}: {e}"
        return False
    ep.step_rewards.append(float(reward))
    ep.step_process.append(float(info["reward_parts"]["process"]))
    ep.reward += float(reward)
    ep.success = bool(info.get("success", False))
    ep.invalid += int(not info.get("valid", True))
    if gen[-1] != tokenizer.eos_token_id:
        ep.end = "turn hit max_new_tokens"
    if terminated or truncated or last_turn:
        ep.end = ep.end or ("terminated" if terminated else "turn limit")
        return False
    suffix = env_suffix_ids(tokenizer, env.unwrapped.transcript.messages()[n_before + 1:])
    if len(ep.completion_ids) + len(suffix) >= max_completion_tokens:
        ep.end = "context limit"
        return False
    ep.completion_ids += suffix
    ep.env_mask += [0] * len(suffix)
    ep.logprobs += [0.0] * len(suffix)
    return True
