"""Fuzz campaign: replay the adversarial action corpus on every registered env and report what broke.

For each env (and the parser variants that read text differently: GSM8K with ``parser="command"``, HotpotQA with
``parser="tag"``) it steps every action of :func:`agentgym_r1.core.fuzz.adversarial_actions` (the named worst shapes
at the maximum action length, then seeded random mixtures of openers and fillers), resetting when an episode ends,
and prints: actions stepped, exceptions raised by ``step`` (must be 0), the worst and median step time with the shape
that took longest, and the growth of the process's peak RSS. Exit status 1 if any step raised.

    PYTHONPATH=. python benchmarks/fuzz_envs.py                      # the full campaign (a few minutes)
    PYTHONPATH=. python benchmarks/fuzz_envs.py --count 20 --budget-s 3   # the short run CI does (tests/test_fuzz_campaign.py)

Target: worst step <= 50 ms at the maximum action length (100,000 characters).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import traceback
from typing import Any

import gymnasium as gym

import agentgym_r1
from agentgym_r1.core.fuzz import adversarial_actions


def _echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: what to echo
    """
    return text


ENV_KWARGS: dict[str, dict[str, Any]] = {
    "AgentR1/ToolEnv-v0": {"tools": [_echo], "tasks": [{"prompt": "Say hi.", "answer": "hi"}]},
    "AgentR1/ALFWorld-v0": {"source": "generated", "num_games": 3},
    "AgentR1/ALFWorld-v1": {"source": "generated", "num_games": 3},
}
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("AgentR1/GSM8K-v0", {"parser": "command"}),
    ("AgentR1/HotpotQA-v0", {"parser": "tag"}),
]


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def fuzz_env(env_id: str, kwargs: dict[str, Any], actions: list[str], budget_s: float) -> dict[str, Any]:
    env = gym.make(env_id, **{**ENV_KWARGS.get(env_id, {}), **kwargs})
    env.reset(seed=0)
    rss0, times, errors, worst = _rss_mib(), [], [], (0.0, "")
    start = time.perf_counter()
    for i, action in enumerate(actions):
        if time.perf_counter() - start > budget_s:
            break
        t0 = time.perf_counter()
        try:
            _, _, terminated, truncated, _ = env.step(action)
        except Exception as e:  # the campaign counts them; a step must never raise on model text
            errors.append(f"action {i} ({action[:40]!r}...): {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
            env.reset(seed=i)
            continue
        spent = time.perf_counter() - t0
        times.append(spent)
        if spent > worst[0]:
            worst = (spent, action[:24])
        if terminated or truncated:
            env.reset(seed=i)
    env.close()
    return {"env": env_id + "".join(f" {k}={v}" for k, v in kwargs.items()), "steps": len(times),
            "exceptions": errors, "worst_ms": worst[0] * 1e3, "worst_shape": worst[1],
            "median_ms": statistics.median(times) * 1e3 if times else 0.0, "rss_growth_mib": _rss_mib() - rss0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300, help="random mixtures after the named worst shapes")
    ap.add_argument("--max-chars", type=int, default=100_000, help="the longest action (the envs' limit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=120.0, help="seconds per env at most")
    ap.add_argument("--env", action="append", help="only these env ids (repeatable)")
    args = ap.parse_args(argv)
    actions = adversarial_actions(args.count, args.max_chars, args.seed)
    targets = [(e, {}) for e in agentgym_r1.env_ids()] + VARIANTS
    if args.env:
        targets = [t for t in targets if t[0] in args.env]
    print(f"{len(actions)} actions up to {args.max_chars:,} characters; budget {args.budget_s:g} s per env")
    print(f"{'env':<44} {'steps':>6} {'exceptions':>10} {'worst ms':>9} {'median ms':>9} {'RSS +MiB':>8}  worst shape")
    failed = 0
    for env_id, kwargs in targets:
        r = fuzz_env(env_id, kwargs, actions, args.budget_s)
        failed += len(r["exceptions"])
        print(f"{r['env']:<44} {r['steps']:>6} {len(r['exceptions']):>10} {r['worst_ms']:>9.1f} "
              f"{r['median_ms']:>9.2f} {r['rss_growth_mib']:>8.1f}  {r['worst_shape']!r}", flush=True)
        for line in r["exceptions"][:5]:
            print(f"    {line}")
    print(f"exceptions: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
