"""The WebShop confirmatory study's analysis (issue 36, item 5; protocol:
``benchmarks/reports/webshop_confirm_protocol.md``).

Reads the results ``train_webshop_proof.py eval`` writes under ``ROOT`` (the runs' ``--out``), each with its per-task
outcomes (task seed, score, success) and provenance:

* ``ROOT/final_sft.json``: the SFT start (``eval --models sft``);
* ``ROOT/final_grpo-seed<S>.json``: the GRPO run of seed S (``eval --models grpo --seed S``);
* ``ROOT/final_sft-continued.json``: the control, SFT continued from the start for as many steps as GRPO's updates
  (``sft --start ROOT/sft --sft-resume 400 --sft-max-steps 440``, then ``eval --models sft-continued``);

and prints the rows (score and success with their intervals, provenance), per GRPO seed the paired comparison with
the start (the score difference with its 95% paired t-interval; McNemar's exact test on success), and the pooled
gain: the mean over seeds of GRPO's score (and success) minus the start's, with a 95% percentile bootstrap interval
over seeds and tasks (10,000 resamples, generator seeded 36: a resample draws the seeds with replacement and the tasks
with replacement, the same tasks for every row; ``hotpotqa_confirm``'s bootstrap). **Learning is shown** iff the
score gain's interval lies above 0. GRPO against the control the same way (the control is one run: only the GRPO
seeds and the tasks are resampled); GRPO is better only if that interval lies above 0. A study with runs missing says
it is partial and which::

    PYTHONPATH=. python benchmarks/webshop_confirm.py runs/webshop-confirm
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hotpotqa_confirm import difference, read
from study import BOOT_SEED, resample_indices
from train_webshop_proof import fmt, paired_test

SEEDS = [0, 1, 2, 3]
CONTROL = "sft-continued"


def outcomes(row: dict[str, Any], path: Path) -> dict[str, list]:
    """A result's per-task outcomes; a result without them (an ``eval`` before they were written) is refused."""
    per = row.get("per_task")
    if not per or "score" not in per or "success" not in per:
        raise ValueError(f"{path} has no per-task outcomes: re-run eval with this code")
    return per


def read_rows(root: Path, seeds: list[int]) -> tuple[Path, dict, dict[int, dict], dict | None]:
    """The start's result and its path (``FileNotFoundError`` without it), each GRPO seed's result that exists and
    the control's if it exists, read from the files ``eval`` writes in ``root``."""
    start_path = root / "final_sft.json"
    start = read(start_path)
    if start is None:
        raise FileNotFoundError(f"no start result {start_path}: score the start first (eval --models sft)")
    runs = {s: r for s in seeds if (r := read(root / f"final_grpo-seed{s}.json"))}
    return start_path, start, runs, read(root / f"final_{CONTROL}.json")


def compared(root: Path, runs: dict[int, dict], control: dict | None) -> list[tuple[Path, dict]]:
    """Each GRPO seed's result and the control's, with its file: the rows compared with the start."""
    named = [*((f"grpo-seed{s}", r) for s, r in runs.items()), (CONTROL, control)]
    return [(root / f"final_{name}.json", row) for name, row in named if row is not None]


def load(root: Path, seeds: list[int]) -> tuple[dict, dict[int, dict], dict | None]:
    """The start's result, each GRPO seed's that exists and the control's if it exists; refuses a row scored on other
    tasks than the start."""
    start_path, start, runs, control = read_rows(root, seeds)
    tasks = outcomes(start, start_path).get("seed")
    for path, row in compared(root, runs, control):
        per = outcomes(row, path)
        other_seeds = tasks is not None and per.get("seed") is not None and per["seed"] != tasks
        if row["seeds"] != start["seeds"] or len(per["score"]) != len(start["per_task"]["score"]) or other_seeds:
            raise ValueError(f"{path} was scored on other tasks than the start ({start_path}); re-run its eval")
    return start, runs, control


def provenance(row: dict[str, Any]) -> str:
    p = row.get("provenance") or {}
    commit = (p.get("commit") or "no commit")[:10]
    dirty = " dirty" if p.get("dirty") else ""
    protocol = "confirmatory" if p.get("protocol") else "exploratory"
    return f"{commit}{dirty}, {protocol}"


def matrix(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    """The per-task ``key`` (score or success) of ``rows``, one row each: (rows, tasks)."""
    return np.array([r["per_task"][key] for r in rows], dtype=float)


def paired_cells(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Two table cells: the paired score difference with its t-interval, and success gained / lost with McNemar's p."""
    t = paired_test(before, after)
    low, high = t["score_ci"]
    return f"{t['score']:+.3f} [{low:+.3f}, {high:+.3f}] | {t['gained']} / {t['lost']}, p = {t['mcnemar_p']:.2g}"


def pooled(x: dict[str, np.ndarray], base: dict[str, np.ndarray], draws: list) -> dict[str, tuple[float, float, float]]:
    """The mean over seeds of each of score and success minus ``base``'s, with its bootstrap interval."""
    return {key: difference(x[key], base[key], draws) for key in ("score", "success")}


def pooled_line(what: str, gain: dict[str, tuple[float, float, float]], shown: str, not_shown: str) -> str:
    point, low, high = gain["score"]
    s_point, s_low, s_high = gain["success"]
    verdict = shown if low > 0 else not_shown
    return (
        f"**{what}**: score {point:+.3f} [{low:+.3f}, {high:+.3f}], success {100 * s_point:+.1f} "
        f"[{100 * s_low:+.1f}, {100 * s_high:+.1f}] points (95% bootstrap over seeds and tasks): {verdict}."
    )


def rows_table(start: dict, runs: dict[int, dict], control: dict | None) -> list[str]:
    lines = [
        "| row | score [95% t], success [95% Wilson] | paired with the start: score [95% t] | "
        "success gained / lost, McNemar | provenance |",
        "|---|---|---|---|---|",
        f"| SFT start | {fmt(start)} | | | {provenance(start)} |",
    ]
    for s, row in sorted(runs.items()):
        lines.append(f"| GRPO seed {s} | {fmt(row)} | {paired_cells(start, row)} | {provenance(row)} |")
    if control is not None:
        lines.append(
            f"| continued SFT (control) | {fmt(control)} | {paired_cells(start, control)} | {provenance(control)} |"
        )
    return lines


def partial(seeds: list[int], runs: dict[int, dict], control: dict | None) -> list[str]:
    """The lines that say the study is partial and what has not run (none when every seed and the control have)."""
    missing = [s for s in seeds if s not in runs]
    if not missing and control is not None:
        return []
    absent = [f"GRPO seeds {missing}"] if missing else []
    absent += ["the continued-SFT control"] if control is None else []
    return [
        f"**Partial**: not run yet: {' and '.join(absent)}. The rule applies to all {len(seeds)} seeds "
        f"and the control; what follows is partial.",
        "",
    ]


def report(root: Path, seeds: list[int] | None = None) -> str:
    seeds = SEEDS if seeds is None else seeds
    try:
        start, runs, control = load(root, seeds)
    except FileNotFoundError as e:
        return f"WebShop confirmatory: {e}"
    lines = [
        f"# WebShop confirmatory ({start['n']} held-out tasks, seeds {start['seeds'][0]}..{start['seeds'][1]})",
        "",
    ]
    lines += [*rows_table(start, runs, control), "", *partial(seeds, runs, control)]
    if not runs:
        return "\n".join(lines)
    ordered = [runs[s] for s in sorted(runs)]
    x = {key: matrix(ordered, key) for key in ("score", "success")}
    draws = resample_indices(len(ordered), int(start["n"]), np.random.default_rng(BOOT_SEED))
    gain = pooled(x, {key: matrix([start], key)[0] for key in x}, draws)
    lines += [pooled_line("GRPO - SFT start", gain, "learning is **shown**", "learning is **not shown**"), ""]
    if control is None:
        return "\n".join(lines)
    lines += [
        "| GRPO seed | paired with the control: score [95% t] | success gained / lost, McNemar |",
        "|---|---|---|",
    ]
    lines += [f"| {s} | {paired_cells(control, row)} |" for s, row in sorted(runs.items())]
    against = pooled(x, {key: matrix([control], key)[0] for key in x}, draws)
    better, not_better = "GRPO is **better** than continued SFT", "GRPO is **not shown** better than continued SFT"
    lines += ["", pooled_line("GRPO - continued SFT", against, better, not_better), ""]
    return "\n".join(lines)


def cli(doc: str, report: Callable[[Path, list[int]], str], example: str) -> None:
    """A study analysis's command: ``ROOT`` (the runs' ``--out``, e.g. ``example``) and ``--seeds``; prints its
    ``report``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help=f"the runs' --out (e.g. {example})")
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS, help="the protocol's GRPO seeds")
    a = parser.parse_args()
    if not a.root.is_dir():
        parser.error(f"{a.root} is not a directory; give the runs' --out, e.g. {example}")
    print(report(a.root, a.seeds))


def main() -> None:
    cli(__doc__, report, "runs/webshop-confirm")


if __name__ == "__main__":
    main()
