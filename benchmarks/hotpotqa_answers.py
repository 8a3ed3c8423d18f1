"""What HotpotQA checkpoints answer on a held-out set's yes/no comparisons: a diagnosis, not a study's analysis.

For each checkpoint, the greedy ReAct agent (``train_hotpotqa_proof.react_episodes``) plays the yes/no comparisons of
the held-out set whose questions a result file lists, and this prints, per gold answer, how often it answered "yes",
"no" or something else. An EM that moves on yes/no questions while the answer is the same word for every question is
the share of that word among the gold answers, not a comparison read off the passages::

    PYTHONPATH=. python benchmarks/hotpotqa_answers.py runs/confirm/results/eval-start.disjoint.json \\
        runs/confirm/start runs/confirm/rloo-concatenated-seed0/final runs/confirm/rloo-concatenated-seed1/final
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

WORDS = ("yes", "no")


def answer_table(golds: Sequence[str], answers: Sequence[str | None]) -> dict[str, dict[str, int]]:
    """For each gold answer, how often the answer given was each of "yes", "no" and "other" (none counts as other)."""
    table: dict[str, dict[str, int]] = {gold: dict.fromkeys((*WORDS, "other"), 0) for gold in WORDS}
    for gold, answer in zip(golds, answers, strict=True):
        given = (answer or "").strip().lower()
        table[gold.lower()][given if given in WORDS else "other"] += 1
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("result", type=Path, help="a result file of train_hotpotqa_proof.py: its 'seeds' are the questions")
    p.add_argument("checkpoints", type=Path, nargs="+")
    a = p.parse_args(argv)
    import torch
    import train_hotpotqa_proof as proof

    from agentgym_r1.adapters.loading import load_model, load_tokenizer

    torch.set_num_threads(1)
    seeds = json.loads(a.result.read_text())["seeds"]
    picked = [(s, t) for s, t in zip(seeds, proof.questions(seeds), strict=True) if proof.gold(t).lower() in WORDS]
    golds = [proof.gold(t) for _, t in picked]
    share = dict(Counter(g.lower() for g in golds))
    print(f"{len(picked)} yes/no comparisons in {a.result.name}; gold answers: {share}")
    for checkpoint in a.checkpoints:
        model = load_model(str(checkpoint), "the checkpoint", device="cpu").eval()
        tokenizer = load_tokenizer(str(checkpoint), "the checkpoint")
        episodes = proof.react_episodes(model, tokenizer, [s for s, _ in picked])
        answers = [(proof.tag_bodies(e, "answer") or [None])[-1] for e in episodes]
        em = sum(e.success for e in episodes) / len(episodes)
        print(f"{checkpoint}: EM {100 * em:.1f}%; gold -> answered {answer_table(golds, answers)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
