"""The HotpotQA proof's reports (``train_hotpotqa_proof.py eval``, ``table`` and ``plot``): a checkpoint's held-out
result, the results as Markdown rows, and the learning curves."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hotpotqa_proof_eval import rag_k, save_rag_result, save_react_result
from hotpotqa_proof_tasks import held_out_sets, scored_label


def run_eval(out: Path, checkpoint: Path, rag: bool) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    name = checkpoint.name if rag or checkpoint.name != "final" else checkpoint.parent.name
    for held, seeds in held_out_sets(out)[1].items():
        if rag:
            save_rag_result(
                out, scored_label(f"eval-{name}", held), model, tokenizer, seeds, rag_k(checkpoint), held_out=held
            )
        else:
            save_react_result(out, scored_label(f"eval-{name}", held), model, tokenizer, seeds, held_out=held)


def run_table(out: Path) -> None:
    """The results as Markdown rows: run, held-out EM [95% CI], its number of questions, steps, minutes."""
    print(
        "| run | held-out EM [95% CI] | questions | steps | wall min | monitoring EM (128) |\n|---|---|---|---|---|---|"
    )
    for path in sorted((out / "results").glob("*.json")):
        r = json.loads(path.read_text())
        print(
            f"| {r['run']} | {100 * r['em']:.1f}% [{100 * r['low']:.1f}, {100 * r['high']:.1f}] | {r['n']} | "
            f"{r.get('steps', '')} | {r.get('minutes', 0):.1f} | {100 * r.get('monitor', math.nan):.1f}% |"
        )


def run_plot(
    out: Path,
    plots: Path,
    stem: str,
    note: str,
    xlabel: str = "wall minutes of training (one torch thread, two runs on two cores)",
) -> None:
    """Learning curves (monitoring EM against wall minutes): RL algorithms, and PPO's mask ablation; the SFT start and
    naive RAG as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {p.parent.name: json.loads(p.read_text())["curve"] for p in sorted(out.glob("*/curve.json"))}
    baselines = {}
    for name in ("sft", "rag"):
        path = out / "results" / f"{name}.json"
        if path.exists():
            baselines[name] = json.loads(path.read_text()).get("monitor")
    if curves and baselines.get("sft") is None:  # every run starts from the SFT checkpoint: its step-0 point
        baselines["sft"] = next(iter(curves.values()))[0]["em"]
    plots.mkdir(parents=True, exist_ok=True)
    groups = {
        "algorithms": lambda n: "-noadv" not in n and "-noloss" not in n,
        "ppo_masks": lambda n: n.startswith("ppo"),
    }
    for group, keep in groups.items():
        if not any(keep(name) for name in curves):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name, curve in curves.items():
            if keep(name):
                ax.plot([c["minutes"] for c in curve], [100 * c["em"] for c in curve], marker=".", label=name)
        styles = {"sft": ("SFT start (ReAct)", ":"), "rag": ("naive RAG", "--")}
        for name, value in baselines.items():
            if value is not None:
                ax.axhline(100 * value, color="grey", linestyle=styles[name][1], label=styles[name][0])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out EM, 128 monitoring questions (%)")
        ax.set_title(
            f"HotpotQA (synthetic, easy), tiny Qwen2: {group.replace('_', ' ')}{note and f' ({note})'}", fontsize=10
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plots / f"{stem}_{group}.svg")
        plt.close(fig)
        print(f"wrote {plots / f'{stem}_{group}.svg'}")
