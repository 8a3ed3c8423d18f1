"""Why the main job's trained agent lands differently on different machines: where two CPU-kernel settings part.

Each kernel setting (``ATEN_CPU_CAPABILITY`` unset, then ``avx2``) runs in a fresh process, from the same start
(:func:`agentgym_r1.leaderboard.training.sft_start`: the same tokenizer, initial weights and expert episodes), and
trains the quick suite's SFT (:func:`agentgym_r1.trainers.sft.sft`, the recipe's batch, learning rate and seed) for
``--steps`` steps, keeping the loss of every step and the weights at a few steps. The parent then reports how far
apart the two settings are: the logits of the first forward pass (the same weights, only the kernels differ), the
losses and the weights' relative distance at each kept step. The budget is steps, so the figures do not depend on the
load.

    PYTHONPATH=. python benchmarks/main_job_divergence.py --steps 60 --out runs/main-job-divergence
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

KEEP = (0, 1, 2, 5, 10, 20, 40, 60, 100, 200, 400, 850)  # steps whose weights are kept (those within --steps)


def child(kernels: str, steps: int, out: Path, threads: int) -> None:
    import torch

    from agentgym_r1.adapters.records import pad_rows
    from agentgym_r1.leaderboard.training import TrainBudget, sft_start
    from agentgym_r1.trainers.sft import sft

    torch.set_num_threads(threads)
    budget = TrainBudget()
    tokenizer, model, episodes = sft_start(budget)
    with torch.no_grad():
        first = [r.prompt_ids + r.completion_ids for r in episodes[: budget.sft_batch]]
        ids = torch.tensor(pad_rows(first, tokenizer.pad_token_id))
        mask = torch.tensor(pad_rows([[1] * len(r) for r in first], 0))
        logits = model(input_ids=ids, attention_mask=mask).logits

    def flat() -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()

    kept = {0: flat()}

    def on_step(step: int, _loss: float) -> None:  # step counts from 1
        if step in KEEP:
            kept[step] = flat()

    losses = sft(
        model,
        tokenizer,
        episodes,
        steps=steps,
        batch_size=budget.sft_batch,
        lr=budget.sft_lr,
        schedule=budget.sft_schedule,
        seed=budget.seed,
        on_step=on_step,
    )
    torch.save(
        {"capability": torch.backends.cpu.get_cpu_capability(), "logits": logits, "losses": losses, "weights": kept},
        out / f"{kernels}.pt",
    )


def compare(out: Path, settings: list[str]) -> dict:
    import torch

    a, b = (torch.load(out / f"{k}.pt") for k in settings)
    logits = (a["logits"] - b["logits"]).abs().max().item() / a["logits"].abs().max().item()
    weights = {
        step: ((a["weights"][step] - b["weights"][step]).norm() / a["weights"][step].norm()).item()
        for step in sorted(a["weights"])
    }
    losses = [abs(x - y) for x, y in zip(a["losses"], b["losses"], strict=True)]
    first = next((i + 1 for i, d in enumerate(losses) if d > 0), None)
    return {
        "settings": settings,
        "capabilities": [a["capability"], b["capability"]],
        "first_pass_logits_max_rel_diff": logits,
        "weights_rel_distance_by_step": weights,
        "first_step_with_a_different_loss": first,
        "loss_abs_diff_at": {s: losses[s - 1] for s in sorted(a["weights"]) if s},
        "losses": {settings[0]: a["losses"], settings[1]: b["losses"]},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--out", type=Path, default=Path("runs/main-job-divergence"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.steps, a.out, a.threads)
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    settings = ["default", "avx2"]
    for kernels in settings:
        env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if kernels != "default":
            env["ATEN_CPU_CAPABILITY"] = kernels
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                kernels,
                "--steps",
                str(a.steps),
                "--out",
                str(a.out),
                "--threads",
                str(a.threads),
            ],
            env=env,
            check=True,
        )
    result = compare(a.out, settings)
    (a.out / "divergence.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
