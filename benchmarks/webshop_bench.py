"""WebShop figures: catalogue load time, step latency (p50/p95) at 1k and 100k products, memory per extra env
instance sharing a catalogue, and how often the title-noun rule that replaces spaCy agrees with other choices.

    PYTHONPATH=. python benchmarks/webshop_bench.py [--sizes 1000 100000] [--episodes 300] [--instances 200]

Step latency is measured over mixed episodes: half played by the oracle (search, product, options, buy), half by a
random shopper (a search from the instruction, then random clickables), so searches, page turns, item pages and
purchases all count.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import time
import tracemalloc
from pathlib import Path

import numpy as np

from agentgym_r1.envs.webshop import WebShopEnv, load_catalogue
from agentgym_r1.envs.webshop.reward import _STOP, title_nouns, type_reward
from agentgym_r1.leaderboard.policies import WebShopOraclePolicy

SHARED = Path(os.environ.get("AGENTGYM_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def load_times(sizes: list[int]) -> None:
    if (SHARED / "webshop").exists():
        t = time.perf_counter()
        c = load_catalogue(SHARED / "webshop", goals="synthetic")
        print(f"load shared catalogue ({len(c)} products, {len(c.goals)} synthetic goals, BM25 index): "
              f"{time.perf_counter() - t:.2f} s")
    for n in sizes:
        t = time.perf_counter()
        load_catalogue("generated", num_products=n)
        print(f"load generated catalogue, {n} products (BM25 index included): {time.perf_counter() - t:.2f} s")


def _random_action(rng: np.random.Generator, info: dict, instruction: str) -> str:
    actions = info["env"]["available_actions"]
    if actions["has_search_bar"]:
        words = instruction.split()
        start = int(rng.integers(max(1, len(words) - 4)))
        return f"search[{' '.join(words[start:start + 5])}]"
    return f"click[{actions['clickables'][int(rng.integers(len(actions['clickables'])))]}]"


def step_latency(n: int, episodes: int) -> None:
    env = WebShopEnv(num_products=n)
    rng, oracle, times = np.random.default_rng(0), WebShopOraclePolicy(), []
    for episode in range(episodes):
        obs, info = env.reset(seed=episode)
        oracle.reset(env, obs, info)
        for _ in range(15):
            action = oracle.act(obs, info) if episode % 2 else _random_action(rng, info, env.instruction)
            t = time.perf_counter()
            obs, _, terminated, _, info = env.step(action)
            times.append(time.perf_counter() - t)
            if terminated:
                break
    ms = np.array(times) * 1000
    print(f"step latency, {n} products, {len(ms)} steps: p50 {np.percentile(ms, 50):.3f} ms, "
          f"p95 {np.percentile(ms, 95):.3f} ms, max {ms.max():.2f} ms")


def memory_per_instance(instances: int) -> None:
    first = WebShopEnv()
    first.reset(seed=0)
    gc.collect()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    envs = []
    for i in range(instances):
        env = WebShopEnv()
        env.reset(seed=i)
        env.step("search[shoes]")
        envs.append(env)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert all(e.catalogue is first.catalogue for e in envs)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    print(f"memory per extra env instance sharing a catalogue ({instances} instances, each reset and after one "
          f"search): {grown / instances / 1024:.1f} KiB (tracemalloc); peak RSS grew {rss / instances:.1f} KiB each")


def _all_words(title: str) -> list[str]:
    return [t for t in title_nouns.__globals__["_TOKEN"].findall(title.lower()) if t[0].isalpha() and t not in _STOP]


def type_agreement() -> None:
    """r_type with the title-noun rule vs. all content words, over each shared goal and its top-10 search results."""
    catalogue = load_catalogue(SHARED / "webshop", goals="synthetic")
    same = total = differs_from_one = 0
    goals = [catalogue.goals[i].meta["goal"] for i in range(len(catalogue.goals))]
    for goal in {g.asin: g for g in goals}.values():
        for asin in catalogue.search(goal.instruction_text, 10):
            product = catalogue.by_asin(asin)
            a = type_reward(product, goal).r_type
            b = type_reward(product, goal, nouns=_all_words).r_type
            same += a == b
            differs_from_one += a != 1.0
            total += 1
    print(f"type factor, noun rule vs all content words, {total} (goal, top-10 result) pairs: agree on "
          f"{same / total:.1%}; r_type below 1 in {differs_from_one / total:.1%} of pairs (noun rule)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--instances", type=int, default=200)
    args = ap.parse_args()
    load_times(args.sizes)
    for n in args.sizes:
        step_latency(n, args.episodes)
    memory_per_instance(args.instances)
    if (SHARED / "webshop").exists():
        type_agreement()
    _ = statistics


if __name__ == "__main__":
    main()
