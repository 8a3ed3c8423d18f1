"""Development runs of the main job's GRPO from a saved SFT checkpoint (issue 36, item 1), with the recipe's config
or one changed (dynamic sampling, another learning rate or schedule): what GRPO adds from a given start.

The third protocol failed where the 850-step SFT landed low (6.9%): from there 110 GRPO updates gained +1.2 points,
since most groups of 8 samples all fail and train nothing. ``main_job_start.py`` saves the SFT's checkpoints; this
script runs the main job's GRPO (:func:`agentgym_r1.leaderboard.training.grpo_config` for the budget, with the
``--config`` fields over it, e.g. ``{"dynamic_sampling": true, "dynamic_sampling_max_tries": 2}``) from one of them,
and scores the start and the result greedily on ``--dev`` problems of the development generator (``--dev-seed``,
never a protocol's held-out one), paired (McNemar's exact test).

    PYTHONPATH=. python benchmarks/main_job_grpo_dev.py --start runs/main-job-start/seed4-default/step850 \
        --seed 4 --config '{"dynamic_sampling": true, "dynamic_sampling_max_tries": 2}' --out runs/grpo-dev/s4-dyn.json
    PYTHONPATH=. python benchmarks/main_job_grpo_dev.py --table runs/grpo-dev/*.json

``--control-sft LR`` runs the control instead of GRPO: the same number of updates (``grpo_steps``) of supervised
fine-tuning from the same start on the main job's expert rows (its ``sft_episodes`` of the training generator, in the
checkpoint's tokenizer), batch ``sft_batch``, at the constant learning rate ``LR`` without warm-up, batches drawn with
replacement by a generator seeded ``seed + 10_000`` (not the SFT's own draw, which would replay its first batches). At
GRPO's learning rate it asks whether GRPO's gain over a start trained at a higher constant rate is more than what
settling at the lower rate gives; at the SFT's own rate, what more SFT gives.

    PYTHONPATH=. python benchmarks/main_job_grpo_dev.py --start runs/main-job-start/seed0-default/step850 --seed 0 \
        --control-sft 6e-4 --out runs/grpo-dev/s0-sft6e-4.json

**Confirmatory runs** (``--protocol PAGE``): the committed protocol's guard (``benchmarks/study.py``) refuses a dirty
tree, another commit, an unlisted seed or held-out set before any work; the problems scored are then the first
``--dev`` *new* problems of the generator ``--dev-seed`` (no problem whose text training can draw, no repeat: the rule
and guard of ``gsm8k_confirm.py``, which stops the run naming any overlap), recorded with the result. ``--new-only``
applies that rule to a development run. ``--pooled FILES`` pairs, for each start, its GRPO run with its control and
prints the mean difference over the starts with a 95% percentile bootstrap interval over starts and problems.

Budgets are in updates (``grpo_steps``) and generated episodes (counted), never in time; the wall time is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import study  # benchmarks/ (the script's folder, on the path when it runs): provenance of every result
from main_job_start import HELD_OUT_GENERATORS, REFUSED, commit_cell, outcomes, pct


def run(a: argparse.Namespace) -> dict:
    import torch
    from transformers import TrainerCallback

    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.leaderboard.suites import env_kwargs
    from agentgym_r1.leaderboard.training import ENV_ID, HELD_OUT_OPTIONS, SOURCE, TrainBudget, TrainPlan, grpo_config
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    torch.set_num_threads(a.threads)
    budget = TrainBudget(**{**json.loads(a.budget), "seed": a.seed})
    tokenizer = load_tokenizer(str(a.start), "the SFT checkpoint")
    model = load_model(str(a.start), "the SFT checkpoint", device="cpu")
    dev = env_kwargs(ENV_ID, SOURCE, {**HELD_OUT_OPTIONS, "seed": a.dev_seed, **json.loads(a.dev_options)})

    def score() -> str:
        return outcomes(model, tokenizer, budget.max_new_tokens, {"dev": (dev, a.problems)})["dev"]

    before = score()
    if a.control_sft is not None:
        t = time.monotonic()
        control_sft(model, tokenizer, budget, a.control_sft)
        seconds = time.monotonic() - t
        return {**record(a, budget, before, score(), seconds), "control_sft_lr": a.control_sft}
    episodes: list[int] = []

    class Count(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "sampling/episodes_total" in logs:
                episodes.append(int(logs["sampling/episodes_total"]))

    with tempfile.TemporaryDirectory() as tmp:
        plan = TrainPlan(results=str(Path(tmp) / "results.sqlite"), out_dir=Path(tmp), budget=budget)
        args = grpo_config(plan, **{"logging_steps": 1, **json.loads(a.config)})
        trainer = AgentGRPOTrainer(model, args, tokenizer, callbacks=[Count()])
        t = time.monotonic()
        try:
            trainer.train()
        finally:
            trainer.rollouts.close()
        seconds = time.monotonic() - t
    return {**record(a, budget, before, score(), seconds), "episodes": episodes[-1] if episodes else None}


CONTROL_DRAW = 10_000  # the control's batches: a draw seeded seed + 10_000, apart from the SFT's own


def control_sft(model: Any, tokenizer: Any, budget: Any, lr: float) -> None:
    """``budget.grpo_steps`` updates of SFT of ``model`` on the main job's expert rows at the constant ``lr``."""
    from agentgym_r1.leaderboard.training import sft_rows
    from agentgym_r1.trainers.sft import sft

    model.train()
    sft(
        model,
        tokenizer,
        sft_rows(budget, tokenizer),
        steps=budget.grpo_steps,
        batch_size=budget.sft_batch,
        lr=lr,
        warmup_steps=0,
        seed=budget.seed + CONTROL_DRAW,
    )


def record(a: argparse.Namespace, budget: Any, before: str, after: str, seconds: float) -> dict:
    import torch

    return {
        "start": str(a.start),
        "seed": a.seed,
        "budget": json.loads(a.budget),
        "config": json.loads(a.config),
        "dev_seed": a.dev_seed,
        "dev_options": json.loads(a.dev_options),
        "problems": a.problems,
        "before": before,
        "after": after,
        "updates": budget.grpo_steps,
        "train_s": round(seconds, 1),
        "threads": a.threads,
        "torch_capability": torch.backends.cpu.get_cpu_capability(),  # the kernels torch chose (AVX2, AVX512, ...)
        "load_after": os.getloadavg(),
    }


def solved(bits: str) -> list[bool]:
    """A string of outcomes (``1`` solved, ``0`` not) as booleans, for :func:`board.pair_outcomes`."""
    return [c == "1" for c in bits]


def table(paths: list[Path]) -> str:
    from agentgym_r1.leaderboard.board import pair_outcomes

    lines = [
        "| run | start | config (or control) | before | after | newly solved / lost | McNemar p | updates | train wall "
        "| commit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        r = json.loads(path.read_text())
        t = pair_outcomes(solved(r["before"]), solved(r["after"]))
        arm = f"SFT at lr {r['control_sft_lr']:g}" if "control_sft_lr" in r else f"`{json.dumps(r['config'])}`"
        lines.append(
            f"| {path.stem} | {r['start']} | {arm} | {pct(r['before'])} | {pct(r['after'])} | "
            f"{t.gained} / {t.lost} | {t.p:.2g} | {r['updates']} | {r['train_s']:.0f} s | "
            f"{commit_cell(r['provenance'])} |"
        )
    return "\n".join(lines)


def versus(first: Path, second: Path) -> str:
    """The two runs' results compared directly, paired on the same problems: the problems only the first solves, only
    the second, and McNemar's exact p. Runs from different starts or sets are refused."""
    from agentgym_r1.leaderboard.board import pair_outcomes

    a, b = (json.loads(path.read_text()) for path in (first, second))
    for key in ("start", "dev_seed", "dev_options", "before"):
        if a.get(key) != b.get(key):
            raise SystemExit(f"{first.stem} and {second.stem} differ in {key}: not paired")
    t = pair_outcomes(solved(b["after"]), solved(a["after"]))  # "gained": solved by the first only
    return (
        f"{first.stem} {pct(a['after'])} against {second.stem} {pct(b['after'])}: solved by the first only "
        f"{t.gained}, by the second only {t.lost}, McNemar p = {t.p:.2g}"
    )


def new_problems(generator_seed: int, n: int) -> list[int]:
    """The first ``n`` reset seeds of the generator whose problem no training draw holds and no earlier one repeats,
    checked by the guard (``gsm8k_confirm.check_overlap`` raises ``HeldOutOverlapError`` naming an overlap)."""
    from gsm8k_confirm import TRAIN_POOL, check_overlap, held_out_set, problems

    train = set(problems(None, range(TRAIN_POOL)).values())
    seeds = held_out_set(generator_seed, n, train)
    check_overlap(generator_seed, seeds, train)
    return seeds


def pooled(paths: list[Path]) -> str:
    """For each start, its GRPO run's success minus its control's on the same problems; the mean over starts with a
    95% percentile bootstrap interval (starts and problems drawn with replacement, the same problems for every start
    of a resample; :func:`study.bootstrap`, the draws every study makes). A start without exactly one GRPO run and
    one control, or runs on other problems, is refused."""
    import numpy as np

    by_start: dict[str, dict[str, dict]] = {}
    for path in paths:
        r = json.loads(path.read_text())
        arm = "control" if "control_sft_lr" in r else "grpo"
        if arm in by_start.setdefault(r["start"], {}):
            raise SystemExit(f"two {arm} runs from {r['start']}")
        by_start[r["start"]][arm] = r
    pairs = []
    for start, arms in sorted(by_start.items()):
        if set(arms) != {"grpo", "control"} or arms["grpo"]["before"] != arms["control"]["before"]:
            raise SystemExit(f"{start}: a GRPO run and a control on the same problems are needed, got {sorted(arms)}")
        if arms["grpo"].get("problems") != arms["control"].get("problems"):
            raise SystemExit(f"{start}: the GRPO run and the control scored different problems")
        pairs.append([solved(arms[k]["after"]) for k in ("grpo", "control")])
    diff = np.array([[float(g) - float(c) for g, c in zip(*pair, strict=True)] for pair in pairs])  # starts x problems
    low, high = study.bootstrap(diff, np.random.default_rng(study.BOOT_SEED))
    per = ", ".join(f"{100 * d.mean():+.1f}" for d in diff)
    return (
        f"GRPO minus control over {diff.shape[0]} starts x {diff.shape[1]} problems: {100 * diff.mean():+.2f} points "
        f"[{100 * low:+.2f}, {100 * high:+.2f}] (95% bootstrap, {study.RESAMPLES} resamples); per start {per}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--start", type=Path, help="an SFT checkpoint (main_job_start.py saves them)")
    p.add_argument("--seed", type=int, default=0, help="the GRPO run's seed (TrainBudget.seed)")
    p.add_argument("--config", default="{}", metavar="JSON", help="AgentGRPOConfig fields over the recipe's")
    p.add_argument("--budget", default="{}", metavar="JSON", help="TrainBudget fields over the recipe's")
    p.add_argument("--control-sft", type=float, metavar="LR", help="run the continued-SFT control at this lr instead")
    p.add_argument("--dev", type=int, default=512, help="development problems scored before and after")
    p.add_argument("--dev-seed", type=int, default=2)
    p.add_argument(
        "--dev-options", default="{}", metavar="JSON", help="env options over the scored set's, e.g. two-step problems"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path)
    p.add_argument("--table", type=Path, nargs="+", help="print the table of these result files, run nothing")
    p.add_argument("--versus", type=Path, nargs=2, help="compare two result files' trained rows, run nothing")
    p.add_argument("--pooled", type=Path, nargs="+", help="the pooled GRPO-against-control analysis, run nothing")
    p.add_argument("--protocol", type=Path, help="a confirmatory run: the committed protocol page (refused otherwise)")
    p.add_argument("--new-only", action="store_true", help="score new problems only (always so with --protocol)")
    a = p.parse_args(argv)
    if a.pooled:
        print(pooled(a.pooled))
        return
    if a.versus:
        print(versus(*a.versus))
        return
    if a.table:
        print(table(a.table))
        return
    if a.start is None or a.out is None:
        p.error("--start and --out are needed to run")
    if a.dev_seed in REFUSED and a.protocol is None:
        p.error(f"--dev-seed {a.dev_seed} is the training generator (0) or a protocol's ({HELD_OUT_GENERATORS})")
    from gsm8k_confirm import held_out_name

    # before any work: the commit and tree the run used; with a protocol, its guard refuses the run first
    record = study.start(
        __file__, a.out.parent, a.protocol, a.seed, [held_out_name(a.dev_seed)] if a.protocol else None
    )
    a.problems = new_problems(a.dev_seed, a.dev) if a.protocol or a.new_only else a.dev
    result = {**run(a), "provenance": record}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1))
    print(table([a.out]))


if __name__ == "__main__":
    main()
