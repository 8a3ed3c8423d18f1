"""The ALFWorld learning study's analysis (issue 36, item 5; protocol:
``benchmarks/reports/alfworld_learning_protocol.md``).

Reads the results ``train_alfworld_proof.py eval`` writes under ``ROOT`` (the runs' ``--out``), each with, per part
(``generated``: the final held-out generated games; ``real``: the real games), each game's key and outcome, and the
provenance:

* ``ROOT/final_sft.json``: the SFT start (``eval --models sft``);
* ``ROOT/final_grpo-seed<S>.json``: the GRPO run of seed S (``eval --models grpo --seed S``);
* ``ROOT/final_sft-continued.json``: the control, SFT continued from the start for as many steps as GRPO's updates
  (``sft --start ROOT/sft --sft-resume S --sft-max-steps S+40``, then ``eval --models sft-continued``);

and prints the rows (success with its Wilson interval on each part, provenance), per GRPO seed and per part McNemar's
exact test on success against the start and against the control (the games gained and lost), and the pooled gain:
the mean over seeds of GRPO's success minus the start's, per part, with a 95% percentile bootstrap interval over seeds
and games (10,000 resamples, generator seeded 36: a resample draws the seeds with replacement and the games with
replacement, the same games for every row; :func:`study.resample_indices`). **Learning is shown** iff the interval of
the gain on the generated games lies above 0; the real games are reported beside it and no claim rests on them alone.
GRPO against the control the same way (the control is one run: only the GRPO seeds and the games are resampled); GRPO
is better only if that interval, on the generated games, lies above 0. A study with runs missing says it is partial
and which::

    PYTHONPATH=. python benchmarks/alfworld_confirm.py runs/alfworld
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hotpotqa_confirm import difference
from study import BOOT_SEED, resample_indices
from webshop_confirm import SEEDS, cli, compared, partial, provenance, read_rows

PARTS = ("generated", "real")  # the claim rests on the generated games; the real ones are reported beside them


def games(row: dict[str, Any], part: str, path: Path) -> list[str]:
    """The keys of the games ``row`` played on ``part``; a result without per-game outcomes is refused."""
    per = (row.get(part) or {}).get("per_game")
    if not per or any("game" not in o or "success" not in o for o in per):
        raise ValueError(f"{path} has no per-game outcomes on its {part} games: re-run eval with this code")
    return [o["game"] for o in per]


def load(root: Path, seeds: list[int]) -> tuple[dict, dict[int, dict], dict | None]:
    """The start's result, each GRPO seed's that exists and the control's if it exists; refuses a row scored on other
    games than the start (on either part)."""
    start_path, start, runs, control = read_rows(root, seeds)
    keys = {part: games(start, part, start_path) for part in PARTS}
    for path, row in compared(root, runs, control):
        for part in PARTS:
            if games(row, part, path) != keys[part]:
                raise ValueError(f"{path} was scored on other {part} games than the start ({start_path}); re-run eval")
    return start, runs, control


def success(row: dict[str, Any], part: str) -> np.ndarray:
    return np.array([o["success"] for o in row[part]["per_game"]], dtype=float)


def rate(row: dict[str, Any], part: str) -> str:
    r = row[part]
    low, high = r["success_ci"]
    return f"{100 * r['success']:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def mcnemar(before: dict[str, Any], after: dict[str, Any], part: str) -> str:
    """Games only ``after`` won / only ``before`` won on ``part``, with McNemar's exact p."""
    from agentgym_r1.leaderboard.board import pair_outcomes

    p = pair_outcomes(success(before, part), success(after, part))
    return f"{p.gained} / {p.lost}, p = {p.p:.2g}"


def rows_table(start: dict, runs: dict[int, dict], control: dict | None) -> list[str]:
    lines = [
        "| row | generated: success [95% Wilson] | gained / lost vs the start, McNemar | real: success "
        "[95% Wilson] | gained / lost vs the start, McNemar | provenance |",
        "|---|---|---|---|---|---|",
        f"| SFT start | {rate(start, 'generated')} | | {rate(start, 'real')} | | {provenance(start)} |",
    ]
    named = [(f"GRPO seed {s}", row) for s, row in sorted(runs.items())]
    named += [("continued SFT (control)", control)] if control is not None else []
    for name, row in named:
        cells = " | ".join(f"{rate(row, part)} | {mcnemar(start, row, part)}" for part in PARTS)
        lines.append(f"| {name} | {cells} | {provenance(row)} |")
    return lines


def pooled_line(what: str, part: str, gain: tuple[float, float, float], verdict: tuple[str, str] | None) -> str:
    point, low, high = gain
    said = f": {verdict[0] if low > 0 else verdict[1]}" if verdict else " (reported; no claim rests on it alone)"
    return (
        f"**{what}, {part} games**: success {100 * point:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] points "
        f"(95% bootstrap over seeds and games){said}."
    )


def pooled(runs: dict[int, dict], base: dict, what: str, verdict: tuple[str, str]) -> list[str]:
    """Per part, the mean over seeds of success minus ``base``'s with its bootstrap interval; the verdict on the
    generated games. Each part's draws come from a generator seeded :data:`study.BOOT_SEED`."""
    ordered = [runs[s] for s in sorted(runs)]
    lines = []
    for part in PARTS:
        x = np.array([success(row, part) for row in ordered])
        draws = resample_indices(len(ordered), x.shape[1], np.random.default_rng(BOOT_SEED))
        gain = difference(x, success(base, part), draws)
        lines += [pooled_line(what, part, gain, verdict if part == "generated" else None), ""]
    return lines


def report(root: Path, seeds: list[int] | None = None) -> str:
    seeds = SEEDS if seeds is None else seeds
    try:
        start, runs, control = load(root, seeds)
    except FileNotFoundError as e:
        return f"ALFWorld learning: {e}"
    lines = [
        f"# ALFWorld learning ({start['generated']['n']} held-out generated games, {start['real']['n']} real games)",
        "",
        *rows_table(start, runs, control),
        "",
        *partial(seeds, runs, control),
    ]
    if not runs:
        return "\n".join(lines)
    lines += pooled(runs, start, "GRPO - SFT start", ("learning is **shown**", "learning is **not shown**"))
    if control is None:
        return "\n".join(lines)
    lines += [
        "| GRPO seed | generated: gained / lost vs the control, McNemar | real: gained / lost vs the control, "
        "McNemar |",
        "|---|---|---|",
        *(
            f"| {s} | {mcnemar(control, row, 'generated')} | {mcnemar(control, row, 'real')} |"
            for s, row in sorted(runs.items())
        ),
        "",
    ]
    better = ("GRPO is **better** than continued SFT", "GRPO is **not shown** better than continued SFT")
    return "\n".join(lines + pooled(runs, control, "GRPO - continued SFT", better))


def main() -> None:
    cli(__doc__, report, "runs/alfworld")


if __name__ == "__main__":
    main()
