"""The HotpotQA confirmatory study's analysis (issue 36, item 2; protocol:
``benchmarks/reports/hotpotqa_confirmatory_protocol.md``).

Reads the result files ``train_hotpotqa_proof.py`` writes under ``ROOT`` (each with its per-question outcomes):

* ``ROOT/confirm/results/eval-start.<set>.json``: the SFT start (``eval --checkpoint ROOT/confirm/start``);
* ``ROOT/confirm/results/rloo-concatenated-seed<S>.<set>.json``: the RL runs, one per seed;
* ``ROOT/confirm-sft-updates/results/eval-sft.<set>.json`` and ``ROOT/confirm-sft-compute/results/eval-sft.<set>.json``:
  SFT continued from the start for the RL runs' number of updates, and for their wall time, each checkpoint scored by
  ``eval --checkpoint ROOT/confirm-sft-*/sft`` (at the registered commit the ``sft`` phase's own results hold no
  per-question outcomes, which the paired analysis needs; ``eval`` plays the same greedy episodes);
* ``ROOT/confirm-rag/results/rag.<set>.json``: the naive RAG baseline;

and prints, for each held-out set, the rows (EM per seed, mean, pooled Wilson interval, EM by question type), the
**ratio to the start** R = mean over seeds of EM(run) / EM(start) with its 95% percentile bootstrap interval over
seeds and questions (10,000 resamples, generator seeded 36: a resample draws the seeds with replacement and the
questions with replacement, the same questions for every row), the protocol's verdicts on R, and the paired
difference of the RL runs against each control (the same bootstrap; a control is one run, so only the RL seeds and
the questions are resampled) with McNemar's exact test per seed. A row not yet run is listed as such::

    PYTHONPATH=. python benchmarks/hotpotqa_confirm.py runs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from study import BOOT_SEED, interval, resample_indices

SEEDS = list(range(8))
SETS = ("fresh", "disjoint")
RL = "rloo-concatenated"
CONTROLS = {  # name -> (directory under ROOT, the scored result's label, the training phase's result label, what it is)
    "sft-updates": ("confirm-sft-updates", "eval-sft", "sft", "continued SFT, same number of updates (840)"),
    "sft-compute": ("confirm-sft-compute", "eval-sft", "sft", "continued SFT, same wall time"),
    "rag": ("confirm-rag", "rag", "rag", "naive RAG, top-k, same number of updates"),
}


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def load(root: Path, held: str, seeds: list[int]) -> tuple[dict, dict[int, dict], dict[str, dict]]:
    """The start's result, each RL seed's that exists, and each control's that exists, on held-out set ``held``;
    refuses a row scored on other questions than the start."""
    start = read(root / "confirm" / "results" / f"eval-start.{held}.json")
    if start is None:
        raise FileNotFoundError(f"no start result {root}/confirm/results/eval-start.{held}.json: score the start first")
    runs = {s: r for s in seeds if (r := read(root / "confirm" / "results" / f"{RL}-seed{s}.{held}.json"))}
    controls = {
        name: r
        for name, (sub, label, _, _) in CONTROLS.items()
        if (r := read(root / sub / "results" / f"{label}.{held}.json"))
    }
    for name, row in controls.items():  # an eval of a checkpoint: its steps are in the training phase's own result
        sub, _, phase, _ = CONTROLS[name]
        row.setdefault("steps", (read(root / sub / "results" / f"{phase}.{held}.json") or {}).get("steps", "?"))
    for row in [*runs.values(), *controls.values()]:
        if row["seeds"] != start["seeds"]:
            raise ValueError(f"{row['run']} was scored on other questions than the start")
    return start, runs, controls


def ratio(runs: np.ndarray, start: np.ndarray, draws: list) -> tuple[float, float, float]:
    """R (the mean over seeds of EM(run) / EM(start)) and its bootstrap interval; ``runs`` is (seeds, questions)."""
    point = float(runs.mean() / start.mean())
    values = np.array([runs[np.ix_(s, q)].mean() / max(start[q].mean(), 1e-12) for s, q in draws])
    return (point, *interval(values))


def difference(runs: np.ndarray, control: np.ndarray, draws: list) -> tuple[float, float, float]:
    """The mean over seeds of EM(run) - EM(control) and its bootstrap interval; ``control`` is one row."""
    point = float(runs.mean() - control.mean())
    values = np.array([runs[np.ix_(s, q)].mean() - control[q].mean() for s, q in draws])
    return (point, *interval(values))


def verdicts(low: float, point: float) -> list[str]:
    """The protocol's rule on R's interval."""
    better = "RL is better than its start" if low > 1 else "RL is **not shown** better than its start"
    if low >= 2:
        twice = "2x is **confirmed**"
    elif point >= 2:
        twice = "2x is **not confirmed** (the point estimate reaches 2, the interval does not)"
    else:
        twice = "2x is **not reached** (the point estimate is below 2)"
    return [better, twice]


def by_type(row: dict) -> str:
    return ", ".join(f"{k} {100 * v:.1f}" for k, v in row["by_type"].items())


def report(root: Path, seeds: list[int] | None = None) -> str:
    from agentgym_r1.leaderboard.board import pair_outcomes, wilson

    seeds = SEEDS if seeds is None else seeds
    lines: list[str] = []
    for held in SETS:
        try:
            start_row, runs, controls = load(root, held, seeds)
        except FileNotFoundError as e:
            lines += [f"## {held}", "", str(e), ""]
            continue
        start = np.array(start_row["solved"], dtype=float)
        lines += [f"## {held} ({start.size} questions)", ""]
        lines += ["| row | EM per seed | mean EM | 95% CI (pooled Wilson) | EM by type (%) |", "|---|---|---|---|---|"]
        w = wilson(int(start.sum()), start.size)
        lines.append(
            f"| SFT start | | {100 * start.mean():.1f}% | [{100 * w.low:.1f}, {100 * w.high:.1f}] | "
            f"{by_type(start_row)} |"
        )
        if runs:
            x = np.array([runs[s]["solved"] for s in sorted(runs)], dtype=float)
            w = wilson(int(x.sum()), x.size)
            per = " / ".join(f"{100 * m:.1f}" for m in x.mean(1))
            types = {k: np.mean([runs[s]["by_type"][k] for s in runs]) for k in start_row["by_type"]}
            lines.append(
                f"| RL (RLOO), seeds {', '.join(map(str, sorted(runs)))} | {per} | {100 * x.mean():.1f}% | "
                f"[{100 * w.low:.1f}, {100 * w.high:.1f}] | {by_type({'by_type': types})} |"
            )
        missing = [s for s in seeds if s not in runs]
        for name, (_, _, _, what) in CONTROLS.items():
            if name in controls:
                c = np.array(controls[name]["solved"], dtype=float)
                w = wilson(int(c.sum()), c.size)
                extra = f" (k = {controls[name]['rag_k']})" if "rag_k" in controls[name] else ""
                lines.append(
                    f"| {what}{extra}, {controls[name].get('steps', '?')} steps | | {100 * c.mean():.1f}% | "
                    f"[{100 * w.low:.1f}, {100 * w.high:.1f}] | {by_type(controls[name])} |"
                )
            else:
                lines.append(f"| {what} | not run | | | |")
        lines.append("")
        if missing:
            lines += [f"RL seeds not run yet: {missing}. The rule applies to all {len(seeds)}; below is partial.", ""]
        if not runs:
            continue
        rng = np.random.default_rng(BOOT_SEED)
        draws = resample_indices(x.shape[0], x.shape[1], rng)
        point, low, high = ratio(x, start, draws)
        lines += [
            f"**Ratio to the start** R = {point:.2f} [{low:.2f}, {high:.2f}]: " + "; ".join(verdicts(low, point)) + ".",
            "",
        ]
        lines += [
            "| RL - row | mean difference [95% bootstrap CI] | McNemar per seed (RL only / row only, p) |",
            "|---|---|---|",
        ]
        for name, row in [("start", start_row), *controls.items()]:
            c = np.array(row["solved"], dtype=float)
            point, low, high = difference(x, c, draws)
            per = "; ".join(f"{t.gained}/{t.lost}, {t.p:.2g}" for t in (pair_outcomes(c, r) for r in x))
            what = "SFT start" if name == "start" else CONTROLS[name][3]
            verdict = "above 0" if low > 0 else ("below 0" if high < 0 else "includes 0")
            lines.append(f"| {what} | {100 * point:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] ({verdict}) | {per} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]), [int(s) for s in sys.argv[2:]] or None))
