"""The main job's trained agent, trained and scored for given seeds and CPU-kernel settings, without the baselines.

Each run (one training seed under one kernel setting) is a fresh process, so ``ATEN_CPU_CAPABILITY`` is read by torch
before it loads; runs go one at a time, each on ``--threads`` threads. A run trains the quick suite's agent
(:func:`agentgym_r1.leaderboard.training.train_on_board` with ``TrainBudget(seed=SEED)``: the same recipe, the same
held-out episodes and rows as ``leaderboard run --suite quick``), then writes ``OUT/seed{S}-{kernels}.json``: the
seed, the kernel setting, the before/after success with 95% Wilson intervals, the paired test (discordant counts,
McNemar's exact p: :func:`agentgym_r1.leaderboard.board.paired_rows`), the steps, the wall time, ``git rev-parse
HEAD`` and whether the tree was dirty. Budgets are steps, so a result does not depend on the machine's load; the wall
time does (the load average is recorded beside it).

    PYTHONPATH=. python benchmarks/main_job_seeds.py --seeds 0 1 2 3 4 --kernels default avx2 --out runs/main-job
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import study  # benchmarks/: provenance of every result, the confirmatory guard (--protocol)

from agentgym_r1.leaderboard.suites import TRAINED_ENTRY, TRAINED_HELD_OUT_OPTIONS

KERNELS = ("default", "avx2", "avx512")  # ATEN_CPU_CAPABILITY values; "default" leaves it unset


def child_env(kernels: str, threads: int) -> dict[str, str]:
    """The environment of a run's process: ``threads`` threads for torch and MKL, and ``ATEN_CPU_CAPABILITY`` set to
    ``kernels`` (unset for ``"default"``), read by torch before it loads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "default":
        env["ATEN_CPU_CAPABILITY"] = kernels
    return env


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


def run_one(
    seed: int, kernels: str, out: Path, threads: int, changes: dict, episodes: int, held_out_seed: int | None = None
) -> dict:
    """Train and score one run in this process (the parent sets the kernel variable before torch loads)."""
    import dataclasses

    import torch

    from agentgym_r1.leaderboard.board import board, paired_rows
    from agentgym_r1.leaderboard.store import ResultsStore
    from agentgym_r1.leaderboard.training import TrainBudget, TrainPlan, train_on_board

    torch.set_num_threads(threads)
    name = f"seed{seed}-{kernels}"
    plan = TrainPlan(
        str(out / name / "results.sqlite"),
        out / name / "train",
        episodes,
        budget=TrainBudget(**{**changes, "seed": seed}),
        **({} if held_out_seed is None else {"held_out_seed": held_out_seed}),
    )
    start = time.monotonic()
    rec = train_on_board(plan, say=lambda line: print(f"[{name}] {line}", flush=True))
    wall = time.monotonic() - start
    store = ResultsStore(plan.results)
    try:
        rows = [r for rs in board(store, references=False).values() for r in rs if r.kind == "trained"]
        (pair,) = paired_rows(store).values()
    finally:
        store.close()
    before, after = sorted(rows, key=lambda r: "after" in r.policy)
    stat = {r.policy: r.metrics["accuracy"] for r in rows}
    return {
        "seed": seed,
        "kernels": kernels,
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": threads,
        "status": rec.status,
        "message": rec.message,
        "episodes": plan.episodes,
        "before": dataclasses.asdict(stat[before.policy]),
        "after": dataclasses.asdict(stat[after.policy]),
        "gained": pair.gained,
        "lost": pair.lost,
        "pairs": pair.pairs,
        "mcnemar_p": pair.p,
        "separated": stat[after.policy].low > stat[before.policy].high,
        "curve": rec.curve,
        "budget": dataclasses.asdict(plan.budget),
        "wall_s": round(wall, 1),
        "load_after": os.getloadavg(),
        "held_out_seed": plan.held_out_seed,
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def held_out_name(seed: int) -> str:
    """The held-out set's name in a protocol: the GSM8K synthetic generator's seed."""
    return f"gsm8k-synthetic-seed{seed}"


def first_rows(run_dir: Path, first: int) -> dict:
    """The two rows and their paired test on the first ``first`` held-out episodes only (reset seeds 0..first-1 of the
    same generator: what a run scored on ``first`` problems would have played), read from the run's results store."""
    from agentgym_r1.leaderboard.board import pair_episodes, wilson
    from agentgym_r1.leaderboard.store import ResultsStore

    store = ResultsStore(str(run_dir / "results.sqlite"))
    try:
        (rec,) = store.trainings()
        ids = {r["policy"]: r["id"] for r in store.runs() if r["policy"] in (rec.before_policy, rec.after_policy)}
        before, after = (
            [e for e in store.episodes(ids[p]) if e.idx < first] for p in (rec.before_policy, rec.after_policy)
        )
    finally:
        store.close()
    if len(before) < first or len(after) < first:
        raise SystemExit(f"{run_dir}: {len(before)} and {len(after)} episodes stored, fewer than --first {first}")
    pair = pair_episodes(before, after)
    rows = {k: wilson(sum(e.success for e in eps), len(eps)) for k, eps in (("before", before), ("after", after))}
    out = {k: {"value": s.value, "low": s.low, "high": s.high} for k, s in rows.items()}
    return {
        **out,
        "gained": pair.gained,
        "lost": pair.lost,
        "mcnemar_p": pair.p,
        "separated": rows["after"].low > rows["before"].high,
    }


def table(out: Path, first: int | None = None) -> str:
    """The markdown table of every run's JSON in ``out``: seed, kernels, the two rows, the paired test, the rule (with
    ``first``: on the first ``first`` held-out episodes of each run, from its results store)."""
    lines = [
        "| seed | kernels | before [95% CI] | after [95% CI] | gain | newly solved / lost | McNemar p | "
        "p < 0.01 and intervals apart | steps (SFT + GRPO) | wall (load after) | commit (dirty) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(out.glob("seed*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if first is not None:
            r |= first_rows(out / path.stem, first)
        b, a = r["before"], r["after"]
        ok = r["mcnemar_p"] < 0.01 and r["separated"]
        lines.append(
            f"| {r['seed']} | {r['kernels']} ({r['torch_capability']}) | {100 * b['value']:.1f} "
            f"[{100 * b['low']:.1f}, {100 * b['high']:.1f}] | {100 * a['value']:.1f} "
            f"[{100 * a['low']:.1f}, {100 * a['high']:.1f}] | {100 * (a['value'] - b['value']):+.1f} | "
            f"{r['gained']} / {r['lost']} | {r['mcnemar_p']:.2g} | {'yes' if ok else 'NO'} | "
            f"{r['budget']['sft_steps']} + {r['budget']['grpo_steps']} | {r['wall_s']:.0f} s "
            f"({r['load_after'][0]:.1f}) | {r['commit'][:7]}{' (dirty)' if r['dirty'] else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--kernels", nargs="+", default=["default"], choices=sorted(set(KERNELS)))
    p.add_argument("--out", type=Path, default=Path("runs/main-job"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--budget",
        default="{}",
        metavar="JSON",
        help="TrainBudget fields over the recipe's, e.g. '{\"grpo_steps\": 80}' (exploration only)",
    )
    p.add_argument("--episodes", type=int, default=TRAINED_ENTRY.episodes, help="held-out episodes of each row")
    p.add_argument(
        "--held-out-seed",
        type=int,
        default=TRAINED_HELD_OUT_OPTIONS["seed"],
        help="the generator seed of the rows' problems (the main job's by default; studies choose on another)",
    )
    p.add_argument("--protocol", type=Path, default=None, help="a registered protocol: a confirmatory run")
    p.add_argument("--table", action="store_true", help="print the markdown table of the runs in --out, run nothing")
    p.add_argument("--first", type=int, default=None, help="with --table: on each run's first N held-out episodes")
    p.add_argument("--child", nargs=2, metavar=("SEED", "KERNELS"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.table:
        print(table(a.out, a.first))
        return 0
    if a.child:
        seed, kernels = int(a.child[0]), a.child[1]
        record = study.start(__file__, a.out, a.protocol, seed, [held_out_name(a.held_out_seed)])
        result = run_one(seed, kernels, a.out, a.threads, json.loads(a.budget), a.episodes, a.held_out_seed)
        result["provenance"] = record
        (a.out / f"seed{seed}-{kernels}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(
            json.dumps(
                {k: result[k] for k in ("seed", "kernels", "before", "after", "gained", "lost", "mcnemar_p", "wall_s")}
            ),
            flush=True,
        )
        return 0 if result["status"] == "done" else 1
    for seed in a.seeds:  # a confirmatory run is refused before any work (protocol, seeds, held-out set, clean tree)
        study.start(__file__, a.out, a.protocol, seed, [held_out_name(a.held_out_seed)])
    a.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for seed in a.seeds:  # one at a time, each with the threads to itself; both kernel settings of a seed together
        for kernels in a.kernels:
            env = child_env(kernels, a.threads)
            cmd = [
                sys.executable,
                __file__,
                "--child",
                str(seed),
                kernels,
                "--out",
                str(a.out),
                "--threads",
                str(a.threads),
                "--budget",
                a.budget,
                "--episodes",
                str(a.episodes),
                "--held-out-seed",
                str(a.held_out_seed),
                *(["--protocol", str(a.protocol)] if a.protocol else []),
            ]
            failed += subprocess.run(cmd, env=env).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
