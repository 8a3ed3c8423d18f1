"""Rollouts of ALFWorld episodes on each env backend: episodes/s and the env's share of wall time.

    PYTHONPATH=. python benchmarks/env_backend_bench.py [--episodes 64] [--games 8] [--workers 1 2]
        [--backends thread process ray] [--max-turns 30] [--engine fast|textworld]

No model: a scripted chat backend plays each game's expert plan (computed beforehand in this process, looked up by
the game's intro), so all the time that is not the env's is the engine's own bookkeeping. Episodes pick their game
with ``options={"index": i % games}`` on ``AgentR1/ALFWorld-v1`` over ``--games`` generated games. Each backend and
worker count gets a fresh engine and one warm-up rollout (every game twice, so each worker has loaded every game);
the figures are the next rollout of ``--episodes`` episodes. ``env share`` is the engine's env time (wall time of
the reset and step batches) over the rollout's wall time.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters import ChatReply, Prompt, RolloutConfig, RolloutEngine, SamplingParams

ENV_ID = "AgentR1/ALFWorld-v1"


class ExpertBackend:
    """A chat backend that answers each conversation with the next command of its game's expert plan."""

    def __init__(self, plans: dict[str, list[str]]) -> None:
        self.plans = plans

    def chat(self, conversations: Sequence[Sequence[dict[str, Any]]], params: SamplingParams) -> list[ChatReply]:
        replies = []
        for messages in conversations:
            intro = next(m["content"] for m in messages if m["role"] == "user")
            plan, turn = self.plans[intro], sum(m["role"] == "assistant" for m in messages)
            replies.append(ChatReply(plan[turn] if turn < len(plan) else "look", "stop"))
        return replies


def expert_plans(kwargs: dict[str, Any], games: int) -> dict[str, list[str]]:
    env = gym.make(ENV_ID, **kwargs)
    plans = {}
    for i in range(games):
        env.reset(options={"index": i})
        intro = next(m["content"] for m in env.unwrapped.transcript.messages() if m["role"] == "user")
        plans[intro] = env.unwrapped.expert_plan()
    env.close()
    return plans


def measure(
    backend: str, workers: int, args: argparse.Namespace, kwargs: dict[str, Any], plans: dict[str, list[str]]
) -> dict[str, float]:
    config = RolloutConfig(max_turns=args.max_turns, env_backend=backend, env_workers=workers, seed=0)
    engine = RolloutEngine(ExpertBackend(plans), None, config)
    try:
        warm = [
            Prompt(ENV_ID, kwargs, options={"index": i // max(workers, 1)}) for i in range(args.games * max(workers, 1))
        ]
        engine.rollout(warm)
        prompts = [Prompt(ENV_ID, kwargs, options={"index": i % args.games}) for i in range(args.episodes)]
        batch = engine.rollout(prompts)
    finally:
        engine.close()
    failed = [e.error for e in batch.episodes if e.end_reason in ("env_error", "generation_error")]
    assert not failed, failed[:3]
    t = batch.timings
    steps = sum(len(e.turns) for e in batch.episodes)
    return {
        "seconds": t["total"],
        "episodes_per_s": len(batch.episodes) / t["total"],
        "env_share": t["env"] / t["total"],
        "steps_per_s": steps / t["total"],
        "success": sum(e.success for e in batch.episodes) / len(batch.episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--games", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backends", nargs="+", default=["thread", "process", "ray"])
    parser.add_argument("--max-turns", type=int, default=30)
    parser.add_argument(
        "--engine",
        default="fast",
        choices=["fast", "textworld"],
        help="ALFWorld's engine: the fast one (default) or TextWorld's stock PddlEnv",
    )
    args = parser.parse_args()
    kwargs = {"source": "generated", "num_games": args.games, "engine": args.engine}
    plans = expert_plans(kwargs, args.games)
    if "ray" in args.backends:
        import ray

        ray.init(num_cpus=max(args.workers), include_dashboard=False, logging_level="WARNING")
    print(
        f"{args.episodes} episodes of {ENV_ID} (engine {args.engine}, {args.games} generated games, expert plans, "
        f"at most {args.max_turns} turns), {os.cpu_count()} CPUs"
    )
    print(
        f"{'backend':<8} {'workers':>7} {'seconds':>8} {'episodes/s':>11} {'steps/s':>8} {'env share':>10} "
        f"{'success':>8}"
    )
    for backend in args.backends:
        for workers in args.workers:
            r = measure(backend, workers, args, kwargs, plans)
            print(
                f"{backend:<8} {workers:>7} {r['seconds']:>8.2f} {r['episodes_per_s']:>11.2f} "
                f"{r['steps_per_s']:>8.1f} {r['env_share']:>10.1%} {r['success']:>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
