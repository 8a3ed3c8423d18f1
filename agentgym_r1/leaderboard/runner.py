"""Play episodes of a policy on an env and summarise them."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym

from agentgym_r1.error import PolicyTimeout
from agentgym_r1.leaderboard.policies import Policy
from agentgym_r1.leaderboard.store import EpisodeRecord


def run_episode(env: gym.Env, policy: Policy, seed: int, idx: int = 0) -> EpisodeRecord:
    """Play episode ``idx`` of a run from ``seed``. A model that times out ends the episode unsolved, with the reason
    in ``error``."""
    obs, info = env.reset(seed=seed)
    policy.seed_episode(seed)  # the episode's draws depend on its seed only, so a resumed run replays it exactly
    policy.reset(env, obs, info)
    total, turns, invalid = 0.0, 0, 0
    terminated = truncated = False
    error = None
    while not (terminated or truncated):
        try:
            action = policy.act(obs, info)
        except PolicyTimeout as e:
            error = str(e)
            break
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        turns += 1
        invalid += not info["valid"]
    task = getattr(env.unwrapped, "task", None)
    grade = getattr(env.unwrapped, "grade", None)
    metrics = info.get("metrics", getattr(grade, "metrics", {}))
    return EpisodeRecord(idx, seed, getattr(task, "id", None), bool(info.get("success", False)), total, turns, invalid,
                         truncated, dict(metrics), error)


def summarise(results: list[EpisodeRecord]) -> dict[str, Any]:
    n = len(results)
    rate = sum(r.success for r in results) / n if n else 0.0
    half = 1.96 * math.sqrt(rate * (1 - rate) / n) if n else 0.0
    return {"episodes": n, "success": rate, "success_ci95": half,
            "mean_reward": sum(r.reward for r in results) / n if n else 0.0,
            "mean_turns": sum(r.turns for r in results) / n if n else 0.0,
            "invalid_rate": sum(r.invalid for r in results) / max(1, sum(r.turns for r in results)),
            "metrics": {k: sum(r.metrics.get(k, 0.0) for r in results) / n
                        for k in dict.fromkeys(k for r in results for k in r.metrics)} if n else {}}
