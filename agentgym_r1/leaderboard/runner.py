"""Play one episode of a policy on an env, and summarise episodes with the board's intervals."""

from __future__ import annotations

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
    return EpisodeRecord(
        idx,
        seed,
        getattr(task, "id", None),
        bool(info.get("success", False)),
        total,
        turns,
        invalid,
        truncated,
        dict(metrics),
        error,
    )


def summarise(results: list[EpisodeRecord]) -> dict[str, Any]:
    """Success (Wilson interval), mean reward and turns (t intervals), the pooled invalid-action rate and the mean of
    each metric: the figures of :mod:`agentgym_r1.leaderboard.board`, as a dict. ``*_ci95`` are half-widths."""
    from agentgym_r1.leaderboard.board import mean_ci, wilson

    n = len(results)
    success = wilson(sum(r.success for r in results), n)
    reward, turns = mean_ci([r.reward for r in results]), mean_ci([float(r.turns) for r in results])
    invalid = wilson(sum(r.invalid for r in results), sum(r.turns for r in results))
    keys = dict.fromkeys(k for r in results for k in r.metrics)
    return {
        "episodes": n,
        "success": success.value if n else 0.0,
        "success_ci95": success.half if n else 0.0,
        "success_low": success.low,
        "success_high": success.high,
        "mean_reward": reward.value if n else 0.0,
        "mean_turns": turns.value if n else 0.0,
        "invalid_rate": invalid.value if invalid.value == invalid.value else 0.0,
        "errors": sum(r.error is not None for r in results),
        "metrics": {k: sum(r.metrics.get(k, 0.0) for r in results) / n for k in keys} if n else {},
    }
