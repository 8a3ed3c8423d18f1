"""Development runs for a start rule of the main job (issue 36, item 1): where its SFT start lands over the last steps,
and whether a monitoring set picks a better start than the last step does.

Under the registered protocols the main job's gain was smallest where its 850-step SFT start landed low (6.9% once):
the start is a lottery (the SFT parts between kernel settings after about 40 steps, ``main_job_divergence.py``). A
start rule would read the SFT at a few late steps on a monitoring set and start GRPO from the best of them. This
script measures what such a rule would pick, on development sets only:

* each run is the main job's SFT (:func:`agentgym_r1.leaderboard.training.sft_start` and
  :func:`~agentgym_r1.leaderboard.training.train_sft` with ``TrainBudget(seed=SEED)``: the main job's steps), in a fresh
  process per seed and kernel setting, as ``main_job_seeds.py`` runs them;
* every ``--every`` steps from ``--first-step`` on, the model in memory plays ``--monitor`` problems of the generator
  seeded ``--monitor-seed`` (the monitoring set a rule would read) and ``--dev`` problems of the generator seeded
  ``--dev-seed`` (the development set that judges the rule), greedy, as the board plays them
  (:meth:`~agentgym_r1.leaderboard.batched.EnginePlayer.from_model`); greedy play draws no random numbers, so the SFT
  takes the steps it takes without the reads;
* each read checkpoint is saved under ``OUT/seed{S}-{kernels}/step{N}`` (a GRPO run can start from it), and
  ``OUT/seed{S}-{kernels}.json`` holds every read's outcomes with ``git rev-parse HEAD`` and the dirty flag.

``--table`` prints, per run, the last step's development score, the step the monitoring set picks (its best score;
the later step on a tie) and that step's development score.

    PYTHONPATH=. python benchmarks/main_job_start.py --seeds 0 1 2 3 --threads 1 --parallel 2 --out runs/main-job-start
    PYTHONPATH=. python benchmarks/main_job_start.py --table --out runs/main-job-start

No held-out set of any protocol is read: the main job's rows use generator 3, the registered protocols 3 and 11.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import study  # benchmarks/ (the script's folder, on the path when it runs): provenance of every result
from main_job_seeds import KERNELS, child_env

REFUSED = frozenset({0, 3, 7, 11, 13})  # the training generator and the registered protocols' held-out generators
HELD_OUT_GENERATORS = ", ".join(str(g) for g in sorted(REFUSED - {0}))


def outcomes(
    model: Any, tokenizer: Any, max_new_tokens: int, sets: dict[str, tuple[dict, int | list[int]]]
) -> dict[str, str]:
    """Each set's first ``n`` problems (``sets[name] = (env kwargs, n)``), or the problems of the listed reset seeds,
    played greedily by the model in memory, as the board plays them (64 episodes per engine batch), as a string of
    ``1`` (solved) and ``0``; the model is left in train mode."""
    from agentgym_r1.leaderboard.batched import EnginePlayer
    from agentgym_r1.leaderboard.training import ENV_ID

    model.eval()
    player = EnginePlayer.from_model(model, tokenizer, max_new_tokens)
    try:
        return {
            k: "".join("1" if r.success else "0" for r in player.play(ENV_ID, kw, items(n), 64))
            for k, (kw, n) in sets.items()
        }
    finally:
        player.close()
        model.train()


def items(problems: int | list[int]) -> list[tuple[int, int]]:
    """The board's ``(index, reset seed)`` items: the first ``problems`` reset seeds, or the listed ones."""
    seeds = range(problems) if isinstance(problems, int) else problems
    return list(enumerate(seeds))


def pct(bits: str) -> str:
    """A string of outcomes as its success rate with the 95% Wilson interval, in percent."""
    from agentgym_r1.leaderboard.board import wilson

    s = wilson(bits.count("1"), len(bits))
    return f"{100 * s.value:.1f} [{100 * s.low:.1f}, {100 * s.high:.1f}]"


def commit_cell(provenance: dict) -> str:
    return f"{provenance['commit'][:7]}{' (dirty)' if provenance['dirty'] else ''}"


def run_one(seed: int, kernels: str, a: argparse.Namespace) -> dict:
    """The SFT of one run with its reads, in this process (the parent set the kernel variable before torch loads)."""
    import torch

    from agentgym_r1.leaderboard.suites import env_kwargs
    from agentgym_r1.leaderboard.training import ENV_ID, HELD_OUT_OPTIONS, SOURCE, TrainBudget, sft_start, train_sft

    torch.set_num_threads(a.threads)
    budget = TrainBudget(**{**json.loads(a.budget), "seed": seed})
    name = f"seed{seed}-{kernels}"
    sets = {
        "monitor": (env_kwargs(ENV_ID, SOURCE, {**HELD_OUT_OPTIONS, "seed": a.monitor_seed}), a.monitor),
        "dev": (env_kwargs(ENV_ID, SOURCE, {**HELD_OUT_OPTIONS, "seed": a.dev_seed}), a.dev),
    }
    tokenizer, model, rows = sft_start(budget)
    reads: list[dict] = []
    start = time.monotonic()

    def read(step: int, _loss: float) -> None:
        if step < a.first_step or (step - a.first_step) % a.every:
            return
        t0 = time.monotonic()
        got = outcomes(model, tokenizer, budget.max_new_tokens, sets)
        path = a.out / name / f"step{step}"
        model.save_pretrained(str(path))
        tokenizer.save_pretrained(str(path))
        reads.append({"step": step, **got, "seconds": round(time.monotonic() - t0, 1)})
        print(f"[{name}] step {step}: " + ", ".join(f"{k} {v.count('1')}/{len(v)}" for k, v in got.items()), flush=True)

    train_sft(budget, tokenizer, model, rows, read)
    return {
        "seed": seed,
        "kernels": kernels,
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": a.threads,
        "monitor_seed": a.monitor_seed,
        "dev_seed": a.dev_seed,
        "budget": json.loads(a.budget),
        "reads": reads,
        "wall_s": round(time.monotonic() - start, 1),
        "load_after": os.getloadavg(),
    }


def pick(reads: list[dict]) -> dict:
    """The read a monitoring rule picks: the best monitoring score, the later step on a tie."""
    return max(reads, key=lambda r: (r["monitor"].count("1"), r["step"]))


def table(out: Path) -> str:
    lines = [
        "| seed | kernels | dev at the last step | picked step (monitor) | dev at the picked step | "
        "dev at each read (lowest-highest) | commit |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted(out.glob("seed*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        last, best = r["reads"][-1], pick(r["reads"])
        devs = [100 * x["dev"].count("1") / len(x["dev"]) for x in r["reads"]]
        lines.append(
            f"| {r['seed']} | {r['kernels']} ({r['torch_capability']}) | {pct(last['dev'])} | {best['step']} "
            f"({best['monitor'].count('1')}/{len(best['monitor'])}) | {pct(best['dev'])} | "
            f"{min(devs):.1f}-{max(devs):.1f} | {commit_cell(r['provenance'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--kernels", nargs="+", default=["default"], choices=sorted(set(KERNELS)))
    p.add_argument("--out", type=Path, default=Path("runs/main-job-start"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parallel", type=int, default=1, help="runs at once (each on --threads threads)")
    p.add_argument("--first-step", type=int, default=450)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--monitor", type=int, default=256, help="monitoring problems read at each step")
    p.add_argument("--monitor-seed", type=int, default=21)
    p.add_argument("--dev", type=int, default=512, help="development problems read at each step")
    p.add_argument("--dev-seed", type=int, default=2)
    p.add_argument("--budget", default="{}", metavar="JSON", help="TrainBudget fields over the recipe's (tests)")
    p.add_argument("--table", action="store_true", help="print the table of the runs in --out, run nothing")
    p.add_argument("--child", nargs=2, metavar=("SEED", "KERNELS"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.table:
        print(table(a.out))
        return 0
    if {a.monitor_seed, a.dev_seed} & REFUSED:
        p.error(
            "the monitoring and development generators must not be the training one (0) or a protocol's "
            f"({HELD_OUT_GENERATORS})"
        )
    if a.child:
        seed, kernels = int(a.child[0]), a.child[1]
        record = study.start(__file__, a.out, None, seed, None)
        result = run_one(seed, kernels, a) | {"provenance": record}
        (a.out / f"seed{seed}-{kernels}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    passed = ["--out", str(a.out), "--threads", str(a.threads), "--first-step", str(a.first_step)]
    passed += ["--every", str(a.every), "--monitor", str(a.monitor), "--monitor-seed", str(a.monitor_seed)]
    passed += ["--dev", str(a.dev), "--dev-seed", str(a.dev_seed), "--budget", a.budget]
    running: list[subprocess.Popen] = []
    failed = 0
    for seed in a.seeds:
        for kernels in a.kernels:
            if len(running) == a.parallel:  # at most --parallel runs at once, each on --threads threads
                failed += running.pop(0).wait() != 0
            env = child_env(kernels, a.threads)
            cmd = [sys.executable, __file__, "--child", str(seed), kernels, *passed]
            running.append(subprocess.Popen(cmd, env=env))
    failed += sum(proc.wait() != 0 for proc in running)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
