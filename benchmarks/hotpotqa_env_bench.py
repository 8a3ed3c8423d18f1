"""Env step latency of AgentR1/HotpotQA-v0 with a search, p50 and p95, on the shared HotpotQA corpus.

The corpus is the distractor paragraphs of all three shared sample files (about 10.8k, deduplicated by title), written
as a ``{"title", "text"}`` JSONL corpus and indexed by the default in-process BM25. The questions are those of the
dev300 sample. A timed step is one ``env.step`` of a ``gym.make`` env (wrappers included) whose action is one
search: the gold supporting titles (short queries) and the question texts (long ones), in Hermes and tag formats.
The raw ``retriever.search`` for the same queries is timed too, to show the env's own overhead.

    PYTHONPATH=. python benchmarks/hotpotqa_env_bench.py [--data ../shared/data/hotpotqa] [--steps 3000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.envs.hotpotqa.data import load_file
from agentgym_r1.leaderboard.policies import hermes_call

SAMPLES = ("dev300", "test500", "train300")


def write_corpus(data: Path, out: Path) -> int:
    seen: dict[str, str] = {}
    for name in SAMPLES:
        for doc in load_file(data / f"hotpot_dev_distractor_sample_{name}.jsonl").documents or ():
            seen.setdefault(doc.title, doc.text)
    with out.open("w", encoding="utf-8") as f:
        for title, text in seen.items():
            f.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
    return len(seen)


def percentiles(ns: list[int]) -> str:
    ms = np.array(ns) / 1e6
    return f"p50 {np.percentile(ms, 50):.3f} ms  p95 {np.percentile(ms, 95):.3f} ms  (n={len(ms)})"


def time_steps(env: gym.Env, queries: list[str], steps: int, tag: bool) -> list[int]:
    """Step times in ns; fails if a search step did not show passages (the timing would then mean nothing)."""
    out: list[int] = []
    env.reset(seed=0)
    for i in range(steps):
        if i % 5 == 0:  # stay under the turn limit of 6
            env.reset(options={"index": i % len(env.unwrapped.tasks)})
        q = queries[i % len(queries)]
        action = f"<search>{q}</search>" if tag else hermes_call("search", query=q)
        t = time.perf_counter_ns()
        obs = env.step(action)[0]
        out.append(time.perf_counter_ns() - t)
        if "Doc 1 (Title: " not in obs:
            raise SystemExit(f"step {i} showed no passages: {obs[:200]!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "hotpotqa"
    )
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args()
    source = args.data / "hotpot_dev_distractor_sample_dev300.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "hotpotqa_shared_corpus.jsonl"
        n_docs = write_corpus(args.data, corpus)
        t = time.perf_counter()
        env = gym.make("AgentR1/HotpotQA-v0", source=str(source), corpus=str(corpus))
        print(f"corpus: {n_docs} paragraphs; env construction incl. BM25 index build: {time.perf_counter() - t:.2f} s")
        tasks = env.unwrapped.tasks
        titles = [t for i in range(len(tasks)) for t in tasks[i].meta["supporting_titles"]]
        questions = [tasks[i].prompt for i in range(len(tasks))]
        retriever = env.unwrapped.retriever
        for q in titles[:200] + questions[:200]:  # warm up
            retriever.search(q, 5)
        for label, queries in (("gold titles", titles), ("question texts", questions)):
            raw = []
            for i in range(args.steps):
                t0 = time.perf_counter_ns()
                retriever.search(queries[i % len(queries)], 5)
                raw.append(time.perf_counter_ns() - t0)
            print(f"retriever.search, {label:14s}: {percentiles(raw)}")
            print(f"env.step hermes,  {label:14s}: {percentiles(time_steps(env, queries, args.steps, False))}")
        tag_env = gym.make("AgentR1/HotpotQA-v0", source=str(source), corpus=str(corpus), parser="tag")
        print(f"env.step tag,     {'gold titles':14s}: {percentiles(time_steps(tag_env, titles, args.steps, True))}")
        syn = gym.make("AgentR1/HotpotQA-v0")
        syn_tasks = [syn.unwrapped.tasks[i] for i in range(500)]
        syn_titles = [t for task in syn_tasks for t in task.meta["supporting_titles"]]
        print(f"env.step hermes,  synthetic KB  : {percentiles(time_steps(syn, syn_titles, args.steps, False))}")
        env.close()
        tag_env.close()
        syn.close()


if __name__ == "__main__":
    main()
