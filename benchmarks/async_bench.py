"""Asynchronous rollouts against the synchronous loop (issue 38 item 1): the GSM8K proof's GRPO recipe
(``benchmarks/train_gsm8k_proof.py``), ``max_staleness`` 0 then 1, back to back, each for ``--minutes`` of wall time.

Reported: updates per hour of each run (target: >= 1.5x with ``max_staleness: 1``), the ``async/*`` metrics of the
asynchronous run (staleness, dropped rows, importance ratios, the share of time the trainer waited), and held-out
greedy success (problems ``FINAL_FIRST ..`` of the generator seeded 1, never used to monitor a run) with 95% Wilson
intervals and an exact McNemar test on the paired problems:

- at equal wall time: each run's policy when its minutes ran out;
- at an equal number of updates: each run's policy after the updates both reached (the smaller run's count, rounded
  down to ``--snapshot-every``): what staleness costs per update.

No evaluation runs inside the timed loop: the policy's weights are copied every ``--snapshot-every`` updates and
scored afterwards. Needs the proof's SFT checkpoint (``train_gsm8k_proof.py sft --out OUT``) in ``OUT/sft``::

    python benchmarks/train_gsm8k_proof.py sft --out runs/async
    python benchmarks/async_bench.py --out runs/async --minutes 20 --threads 1 --held-out 1024

Writes ``OUT/results/async_bench.json`` with the provenance of the code.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import study
import torch
import train_gsm8k_proof as proof  # benchmarks/: the recipe, its env and held-out problems


def held_out(model: Any, tokenizer: Any, n: int) -> list[bool]:
    """Greedy success on each held-out problem ``FINAL_FIRST .. FINAL_FIRST + n - 1`` (the proof's final check)."""
    return proof.solved(
        model.eval(), tokenizer, proof.HELD_OUT["seed"], range(proof.FINAL_FIRST, proof.FINAL_FIRST + n)
    )


def wilson(successes: list[bool]) -> dict[str, float]:
    """The rate with its 95% Wilson interval (the board's :func:`~agentgym_r1.leaderboard.board.wilson`)."""
    from agentgym_r1.leaderboard.board import wilson as interval

    stat = interval(sum(successes), len(successes))
    return {"rate": stat.value, "low": stat.low, "high": stat.high, "n": len(successes)}


def mcnemar(a: list[bool], b: list[bool]) -> float:
    """Exact McNemar p-value of paired outcomes (the board's :func:`~agentgym_r1.leaderboard.board.pair_outcomes`)."""
    from agentgym_r1.leaderboard.board import pair_outcomes

    return pair_outcomes(a, b).p


class Snapshots:
    """The ``evaluate`` of the wall-clock budget: a copy of the policy's weights every few updates (no scoring in
    the timed loop), and each update's wall time."""

    def __init__(self) -> None:
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.seconds: dict[int, float] = {}

    def __call__(self, step: int, model: Any, seconds: float) -> None:
        self.weights[step] = copy.deepcopy(model.state_dict())
        self.seconds[step] = seconds


def train(out: Path, staleness: int, a: argparse.Namespace) -> dict[str, Any]:
    """One run of the proof's GRPO recipe with ``max_staleness=staleness`` for ``a.minutes`` of wall time."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.trainers.budget import WallClockBudget
    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft")
    args = AgentGRPOConfig(
        output_dir=str(out / f"staleness{staleness}"),
        env_id=proof.ENV_ID,
        env_kwargs=proof.ENV_KWARGS,
        max_turns=proof.MAX_TURNS,
        max_new_tokens=proof.MAX_NEW_TOKENS,
        num_generations=8,
        per_device_train_batch_size=a.batch,
        max_completion_length=160,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        beta=0.0,
        temperature=1.0,
        max_steps=100_000,
        logging_steps=1,
        report_to="none",
        gradient_checkpointing=False,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        num_tasks=100_000,
        seed=a.seed,
        data_seed=a.seed,
        max_staleness=staleness,
    )
    snapshots = Snapshots()
    budget = WallClockBudget(a.minutes, cosine=False, evaluate=snapshots, every=a.snapshot_every)
    trainer = AgentGRPOTrainer(model, args, tokenizer, callbacks=[budget])
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    steps = trainer.state.global_step
    logs = [h for h in trainer.state.log_history if "loss" in h]
    keys = sorted({k for h in logs for k in h if k.startswith("async/")})
    metrics = {k: [h[k] for h in logs if k in h] for k in keys}
    print(f"max_staleness={staleness}: {steps} updates in {wall / 60:.1f} min, {3600 * steps / wall:.1f} per hour")
    return {
        "staleness": staleness,
        "updates": steps,
        "wall_s": wall,
        "updates_per_hour": 3600 * steps / wall,
        "async": {k: {"mean": sum(v) / len(v), "max": max(v), "last": v[-1]} for k, v in metrics.items()},
        "snapshots": snapshots,
        "final": copy.deepcopy(model.state_dict()),
    }


def score(out: Path, weights: dict[str, torch.Tensor], n: int) -> list[bool]:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft")
    model.load_state_dict(weights)
    return held_out(model, tokenizer, n)


def compare(out: Path, runs: list[dict[str, Any]], a: argparse.Namespace) -> dict[str, Any]:
    """Held-out success of both runs at equal wall time and at an equal number of updates."""
    sync, fast = runs
    common = min(sync["updates"], fast["updates"]) // a.snapshot_every * a.snapshot_every
    table: dict[str, Any] = {"equal_updates": common}
    for name, pick in (("equal_wall_time", lambda r: r["final"]), ("equal_updates", None)):
        if pick is None:
            if common not in sync["snapshots"].weights or common not in fast["snapshots"].weights:
                continue
            pick = lambda r: r["snapshots"].weights[common]  # noqa: E731
        a_ok, b_ok = score(out, pick(sync), a.held_out), score(out, pick(fast), a.held_out)
        table[name] = {"staleness0": wilson(a_ok), "staleness1": wilson(b_ok), "mcnemar_p": mcnemar(a_ok, b_ok)}
        print(f"{name}: {json.dumps(table[name])}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/async"))
    parser.add_argument("--minutes", type=float, default=20.0, help="wall time of each run")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch", type=int, default=64, help="episodes per update (8 per task)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the trainer and of the generator")
    parser.add_argument("--snapshot-every", type=int, default=5)
    parser.add_argument("--held-out", type=int, default=1024, help="held-out problems scored per policy")
    a = parser.parse_args()
    provenance = study.start(__file__, a.out, None, a.seed)
    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if not (a.out / "sft" / "config.json").is_file():
        raise SystemExit(f"no SFT checkpoint in {a.out / 'sft'}: run train_gsm8k_proof.py sft --out {a.out} first")
    load = os.getloadavg()
    runs = [train(a.out, staleness, a) for staleness in (0, 1)]
    result = {
        "minutes": a.minutes,
        "load_before": load,
        "load_after": os.getloadavg(),
        "speedup": runs[1]["updates_per_hour"] / runs[0]["updates_per_hour"],
        "runs": [{k: v for k, v in r.items() if k not in ("snapshots", "final")} for r in runs],
        "held_out": compare(a.out, runs, a),
        "args": {k: str(v) for k, v in vars(a).items()},
        "provenance": provenance,
    }
    print(f"speedup (updates per hour, max_staleness 1 / 0): {result['speedup']:.2f}x")
    (a.out / "results").mkdir(parents=True, exist_ok=True)
    (a.out / "results" / "async_bench.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
