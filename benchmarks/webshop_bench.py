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
import time
import tracemalloc
from pathlib import Path

import numpy as np

from agentgym_r1.envs.webshop import WebShopEnv, load_catalogue
from agentgym_r1.envs.webshop.reward import _STOP, noun_filter, tokens, type_reward
from agentgym_r1.leaderboard.baselines.webshop import WebShopOraclePolicy

SHARED = Path(os.environ.get("AGENTGYM_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def load_times(sizes: list[int]) -> None:
    if (SHARED / "webshop").exists():
        t = time.perf_counter()
        c = load_catalogue(SHARED / "webshop", goals="synthetic")
        print(
            f"load shared catalogue ({len(c)} products, {len(c.goals)} synthetic goals, BM25 index): "
            f"{time.perf_counter() - t:.2f} s"
        )
    for n in sizes:
        t = time.perf_counter()
        load_catalogue("generated", num_products=n)
        print(f"load generated catalogue, {n} products (BM25 index included): {time.perf_counter() - t:.2f} s")


def _random_action(rng: np.random.Generator, info: dict, instruction: str) -> str:
    actions = info["env"]["available_actions"]
    if actions["has_search_bar"]:
        words = instruction.split()
        start = int(rng.integers(max(1, len(words) - 4)))
        return f"search[{' '.join(words[start : start + 5])}]"
    return f"click[{actions['clickables'][int(rng.integers(len(actions['clickables'])))]}]"


def step_latency(n: int, episodes: int) -> None:
    env = WebShopEnv(num_products=n)
    rng, oracle, times, searches = np.random.default_rng(0), WebShopOraclePolicy(), [], []
    for episode in range(episodes):
        obs, info = env.reset(seed=episode)
        oracle.reset(env, obs, info)
        for _ in range(15):
            action = oracle.act(obs, info) if episode % 2 else _random_action(rng, info, env.instruction)
            t = time.perf_counter()
            obs, _, terminated, _, info = env.step(action)
            times.append(time.perf_counter() - t)
            if action.startswith("search["):
                searches.append(times[-1])
            if terminated:
                break
    ms = np.array(times) * 1000
    print(
        f"step latency, {n} products, {len(ms)} steps: p50 {np.percentile(ms, 50):.3f} ms, "
        f"p95 {np.percentile(ms, 95):.3f} ms, max {ms.max():.2f} ms; search steps only ({len(searches)}): "
        f"p50 {np.percentile(searches, 50) * 1000:.3f} ms, p95 {np.percentile(searches, 95) * 1000:.3f} ms"
    )


def _rss_kib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1024


def memory_per_instance(instances: int) -> None:
    first = WebShopEnv()
    first.reset(seed=0)
    gc.collect()
    rss0 = _rss_kib()
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
    rss = _rss_kib() - rss0
    print(
        f"memory per extra env instance sharing a catalogue ({instances} instances, each reset and after one "
        f"search): {grown / instances / 1024:.1f} KiB (tracemalloc); RSS grew {rss / instances:.1f} KiB each"
    )


def _content_words(title: str) -> list[str]:
    return [t for t in tokens(title) if t[:1].isalpha() and t not in _STOP]


def type_agreement() -> None:
    """How much the type factor depends on the choices that replace spaCy, over each shared synthetic goal and its
    top-10 search results (what an agent would see): the rule vs. the same rule on spaCy's own English tokenizer
    (a blank pipeline: tokenizer only, no tagger), and vs. keeping every content word (no part-of-speech filter)."""
    catalogue = load_catalogue(SHARED / "webshop", goals="synthetic")
    try:
        import spacy

        nlp = spacy.blank("en")
    except ImportError:
        nlp = None
    if nlp is not None:
        same_tokens = sum(
            tokens(p.title) == [t.text.lower() for t in nlp(p.title) if not t.is_space] for p in catalogue
        )
        print(
            f"title tokens identical to spaCy's English tokenizer: {same_tokens / len(catalogue):.1%} of "
            f"{len(catalogue)} titles"
        )
    variants = {"content words": _content_words}
    if nlp is not None:
        variants["spaCy tokens + rule"] = lambda t: noun_filter(x.text.lower() for x in nlp(t) if not x.is_space)
    agree, total, below_one = dict.fromkeys(variants, 0), 0, 0
    goals = [catalogue.goals[i].meta["goal"] for i in range(len(catalogue.goals))]
    for goal in {g.asin: g for g in goals}.values():
        for asin in catalogue.search(goal.instruction_text, 10):
            product = catalogue.by_asin(asin)
            r = type_reward(product, goal).r_type
            below_one += r != 1.0
            total += 1
            for name, fn in variants.items():
                agree[name] += type_reward(product, goal, nouns=fn).r_type == r
    shares = ", ".join(f"{name} {n / total:.1%}" for name, n in agree.items())
    print(
        f"type factor of the noun rule agrees with: {shares}; over {total} (goal, top-10 result) pairs, "
        f"r_type < 1 in {below_one / total:.1%}"
    )


def baselines(episodes: int = 200) -> None:
    """Success and mean score of the rule-based shopper (and the oracle) on each goal set."""
    from agentgym_r1.leaderboard.baselines.webshop import RuleShopperPolicy
    from agentgym_r1.leaderboard.runner import run_episode, summarise

    sources = [("generated 1k", {})]
    if (SHARED / "webshop").exists():
        sources += [(f"shared {g}", {"source": SHARED / "webshop", "goals": g}) for g in ("synthetic", "human")]
    for label, kw in sources:
        for policy in (RuleShopperPolicy(), WebShopOraclePolicy()):
            env = WebShopEnv(**kw)
            results = [run_episode(env, policy, seed) for seed in range(episodes)]
            s = summarise(results)
            score = sum(r.metrics["score"] for r in results) / len(results)
            print(
                f"{policy.name} on {label}, {episodes} episodes: success {s['success']:.1%}, "
                f"mean score {score:.3f}, mean turns {s['mean_turns']:.2f}"
            )


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
    baselines()


if __name__ == "__main__":
    main()
