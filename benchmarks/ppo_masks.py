"""The PPO mask ablation's analysis (issue 36, item 4; protocol: ``benchmarks/reports/ppo_masks_protocol.md``).

Reads the runs' results on the ``ablation`` held-out set (``OUT/results/<run>.ablation.json``, written by
``train_hotpotqa_proof.py ppo ... --held-out ablation``, each with its per-question outcomes) and the start's
(``eval-start.ablation.json``: ``eval --checkpoint OUT/start``), and prints each variant's EM per seed and its mean,
and the paired difference of each pair the protocol names, with a 95% percentile bootstrap interval over seeds and
questions (10,000 resamples, generator seeded 36: a resample draws the seeds with replacement and the questions with
replacement, the same questions for both rows, and averages the per-seed differences), the paired t over seeds, and
per seed McNemar's exact test on the same questions::

    PYTHONPATH=. python benchmarks/ppo_masks.py runs/ppo-masks
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from study import BOOT_SEED, bootstrap

VARIANTS = {  # label prefix -> what it ablates
    "ppo": "full masks",
    "ppo-noadv": "without the advantage mask",
    "ppo-noloss": "without the loss mask",
    "ppo-noadv-noloss": "without either mask",
}
PAIRS = [("ppo", "ppo-noadv"), ("ppo-noadv", "ppo-noadv-noloss"), ("ppo", "ppo-noadv-noloss"), ("ppo", "ppo-noloss")]


def load(out: Path, seeds: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The start's outcomes (questions,) and each variant's (seeds, questions), all on the same questions."""

    def read(name: str) -> dict:
        return json.loads((out / "results" / f"{name}.ablation.json").read_text())

    start = read("eval-start")
    runs = {v: [read(f"{v}-seed{s}") for s in seeds] for v in VARIANTS}
    for rows in runs.values():
        for r in rows:
            if r["seeds"] != start["seeds"]:
                raise ValueError(f"{r['run']} was scored on other questions than the start")
    return np.array(start["solved"]), {v: np.array([r["solved"] for r in rows]) for v, rows in runs.items()}


def report(out: Path, seeds: list[int]) -> str:
    from scipy.stats import ttest_rel

    from agentgym_r1.leaderboard.board import pair_outcomes, wilson

    start, runs = load(out, seeds)
    lines = [
        f"| row | EM per seed ({', '.join(map(str, seeds))}) | mean EM | 95% CI (pooled Wilson) |",
        "|---|---|---|---|",
    ]
    w = wilson(int(start.sum()), start.size)
    lines.append(f"| SFT start | | {100 * start.mean():.1f}% | [{100 * w.low:.1f}, {100 * w.high:.1f}] |")
    for v, what in VARIANTS.items():
        x = runs[v]
        w = wilson(int(x.sum()), x.size)
        per = " / ".join(f"{100 * m:.1f}" for m in x.mean(1))
        lines.append(f"| PPO, {what} | {per} | {100 * x.mean():.1f}% | [{100 * w.low:.1f}, {100 * w.high:.1f}] |")
    lines += [
        "",
        "| pair (A - B) | mean difference [95% bootstrap CI] | paired t over seeds (p) | McNemar per seed "
        "(A only / B only, p) |",
        "|---|---|---|---|",
    ]
    rng = np.random.default_rng(BOOT_SEED)
    pairs = [*PAIRS, *((v, "start") for v in VARIANTS)]
    for a, b in pairs:
        xa = runs[a]
        xb = np.broadcast_to(start, xa.shape) if b == "start" else runs[b]
        low, high = bootstrap(xa.astype(float) - xb, rng)
        t = ttest_rel(xa.mean(1), xb.mean(1))
        tests = [pair_outcomes(rb, ra) for ra, rb in zip(xa, xb, strict=True)]
        per = "; ".join(f"{test.gained}/{test.lost}, {test.p:.2g}" for test in tests)
        gap = f"{100 * (xa.mean() - xb.mean()):+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
        lines.append(
            f"| {VARIANTS[a]} - {VARIANTS.get(b, 'SFT start')} | {gap} | t = {t.statistic:.2f} (p = {t.pvalue:.2g}) "
            f"| {per} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]), [int(s) for s in sys.argv[2:]] or [0, 1, 2, 3]))
