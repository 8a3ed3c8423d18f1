"""Calibration of the generated sources' difficulty levels: success of random, the rule baseline and the oracle.

For each env and level, plays tasks ``0 .. N-1`` of the generated source (``reset(options={"index": i})``, so every
task is a different one) with the leaderboard's baselines, and prints the success rate of each with its 95% Wilson
interval; with ``--real``, the same baselines on the real data under ``../shared/data`` (or ``--data``) beside
them. Then the generators' speed per level: tasks made per second, from a cold start (ALFWorld: games written to a
fresh cache directory; ``easy`` is solved by the planner, the other levels are solvable by construction).

Targets (issue 15): oracle 100% at every level; the rule baseline at most 40% at ``hard`` and between ``easy`` and
``hard`` at ``medium``.

    python benchmarks/calibrate_difficulty.py [--envs gsm8k,hotpotqa,webshop,alfworld] [--tasks 200] [--real]
    python benchmarks/calibrate_difficulty.py --envs alfworld --levels hard --tasks 60 --policies react,oracle
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentgym_r1  # noqa: F401
from agentgym_r1.leaderboard.board import wilson
from agentgym_r1.leaderboard.models import make_policy

LEVELS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class EnvPlan:
    env_id: str
    source: str
    policies: tuple[str, str, str]  # random, rule, oracle
    real: dict[str, Any] = field(default_factory=dict)  # constructor options of the real-data reference


def plans(data: Path) -> dict[str, EnvPlan]:
    return {
        "gsm8k": EnvPlan(
            "AgentR1/GSM8K-v0",
            "synthetic",
            ("random", "scripted", "oracle"),
            {"source": str(data / "gsm8k" / "test.jsonl")},
        ),
        "hotpotqa": EnvPlan(
            "AgentR1/HotpotQA-v0",
            "synthetic",
            ("random", "react", "oracle"),
            {"source": str(data / "hotpotqa" / "hotpot_dev_distractor_sample_dev300.jsonl")},
        ),
        "webshop": EnvPlan(
            "AgentR1/WebShop-v0",
            "generated",
            ("random", "rule", "oracle"),
            {"source": str(data / "webshop"), "goals": "human"},
        ),
        "alfworld": EnvPlan(
            "AgentR1/ALFWorld-v0",
            "generated",
            ("random", "react", "oracle"),
            {"source": str(data / "alfworld"), "split": "valid_unseen"},
        ),
    }


def play(env: gym.Env, policy: Any, index: int) -> bool:
    """One episode of task ``index`` (seeded by it); whether it succeeded."""
    obs, info = env.reset(seed=index, options={"index": index})
    policy.seed_episode(index)
    policy.reset(env, obs, info)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        done = terminated or truncated
    return bool(info.get("success", False))


def source_size(env: Any, default: int) -> int:
    """How many tasks the env's source has (``default`` for an unlimited generated one)."""
    catalogue = getattr(env, "catalogue", None)
    for source in (getattr(env, "games", None), getattr(env, "tasks", None), getattr(catalogue, "goals", None)):
        if source is not None:
            try:
                return len(source)
            except TypeError:  # unlimited
                return default
    return default


def calibrate(plan: EnvPlan, kwargs: dict[str, Any], tasks: int, policies: list[str]) -> dict[str, Any]:
    """Success of each policy over tasks ``0 .. tasks-1`` (fewer when the source has fewer). Tasks are the outer loop,
    so an env that compiles each task once (ALFWorld) does it once for all the policies."""
    env = gym.make(plan.env_id, **kwargs)
    n = min(tasks, source_size(env.unwrapped, tasks))
    played = {name: make_policy(name, plan.env_id, seed=0) for name in policies}
    wins = dict.fromkeys(policies, 0)
    start = time.perf_counter()
    try:
        for i in range(n):
            for name, policy in played.items():
                wins[name] += play(env, policy, i)
            if (i + 1) % 25 == 0:  # progress on stderr: long ALFWorld runs can be read as they go
                print(
                    f"  {plan.env_id} {kwargs.get('difficulty', 'real')}: {i + 1}/{n} "
                    + " ".join(f"{p} {wins[p]}" for p in policies),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        env.close()
    return {
        "tasks": n,
        "seconds": time.perf_counter() - start,
        **{name: wins[name] / n for name in policies},
        **{
            f"{name}_ci": [round(x, 3) for x in (wilson(wins[name], n).low, wilson(wins[name], n).high)]
            for name in policies
        },
    }


def generator_speed(name: str, level: str, tasks: int) -> float:
    """Tasks per second that the level's generator makes, after a warm-up on another seed (imports, caches of
    shared parts such as HotpotQA's KB, which every level shares). ALFWorld writes games to a fresh directory."""
    make = _maker(name, level)
    with tempfile.TemporaryDirectory() as cache:
        for i in range(5):
            make(986, i, cache)
        start = time.perf_counter()
        for i in range(tasks):
            make(987, i, cache)
        return tasks / (time.perf_counter() - start)


def _maker(name: str, level: str) -> Any:
    if name == "gsm8k":
        from agentgym_r1.envs.gsm8k import synthetic

        return lambda seed, i, _: synthetic.generate_problem(seed, i, knobs=synthetic.LEVELS[level])
    if name == "hotpotqa":
        from agentgym_r1.envs.hotpotqa import synthetic as kb

        kb.build_kb(987, 1000)  # the KB is built once per (seed, size), shared by every level
        return lambda seed, i, _: kb.generate_question(987, i + 10_000 * (seed == 986), 1000, kb.LEVELS[level])
    if name == "webshop":
        from agentgym_r1.envs.webshop import generator

        return lambda seed, i, _: generator.generate_goal(seed, 1000, i, generator.LEVELS[level])
    from agentgym_r1.envs.alfworld import generator as games

    return lambda seed, i, cache: games.generate(seed, i, games.TASK_TYPES, cache, games.LEVELS[level])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default="gsm8k,hotpotqa,webshop,alfworld")
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--tasks", type=int, default=200, help="tasks per env and level (default 200)")
    ap.add_argument("--policies", default=None, help="a subset of random,<rule>,oracle by name (default: all three)")
    ap.add_argument("--real", action="store_true", help="also the real-data references under --data")
    ap.add_argument(
        "--data",
        default=str(Path(__file__).resolve().parents[2] / "shared" / "data"),
        help="the shared real data (default: ../shared/data beside the checkout)",
    )
    ap.add_argument("--speed-tasks", type=int, default=200, help="tasks made per level for the speed figure (0: skip)")
    ap.add_argument("--cache-dir", default=None, help="ALFWorld game cache (default: a fresh temporary directory)")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    a = ap.parse_args()
    cache = a.cache_dir or tempfile.mkdtemp(prefix="calibrate-alfworld-")
    out: list[dict[str, Any]] = []
    for name in a.envs.split(","):
        plan = plans(Path(a.data))[name]
        policies = [p for p in plan.policies if a.policies is None or p in a.policies.split(",")]
        rows = [
            (
                level,
                {"source": plan.source, "difficulty": level, **({"cache_dir": cache} if name == "alfworld" else {})},
            )
            for level in a.levels.split(",")
        ]
        if a.real:
            rows.append(("real", plan.real))
        for level, kwargs in rows if a.tasks else []:
            if level == "real" and not Path(kwargs["source"]).exists():
                print(f"{name:9s} real      (no data at {kwargs['source']})", flush=True)
                continue
            row = {"env": name, "level": level, **calibrate(plan, kwargs, a.tasks, policies)}
            if level != "real" and a.speed_tasks:  # ALFWorld's easy games are solved by the planner: ~1 s each
                row["tasks_per_s"] = generator_speed(
                    name, level, a.speed_tasks if name != "alfworld" or level != "easy" else min(a.speed_tasks, 20)
                )
            out.append(row)
            rates = "  ".join(
                f"{p} {100 * row[p]:5.1f}% [{100 * row[p + '_ci'][0]:.1f}, {100 * row[p + '_ci'][1]:.1f}]"
                for p in policies
            )
            speed = f"  gen {row['tasks_per_s']:,.0f} tasks/s" if "tasks_per_s" in row else ""
            print(f"{name:9s} {level:7s} n={row['tasks']:4d}  {rates}{speed}  ({row['seconds']:.0f} s)", flush=True)
    if not a.tasks:  # --tasks 0: the generators' speed only
        for name in a.envs.split(","):
            for level in a.levels.split(","):
                n = a.speed_tasks if name != "alfworld" or level != "easy" else min(a.speed_tasks, 20)
                print(f"{name:9s} {level:7s} gen {generator_speed(name, level, n):,.1f} tasks/s (n={n})", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
