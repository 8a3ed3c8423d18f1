"""Proof of learning on a second multi-turn env (issue 12): GRPO on WebShop's generated catalogue from an SFT start.

Phases (each prints what it measured; everything lands in ``--out``):

    python benchmarks/train_webshop_proof.py sft  --out runs/webshop --threads 1   # tokenizer, tiny Qwen2, SFT
    python benchmarks/train_webshop_proof.py grpo --out runs/webshop --minutes 15 --seed 0 --threads 1
    python benchmarks/train_webshop_proof.py eval --out runs/webshop --seed 0      # SFT vs GRPO, >= 1,000 tasks
    python benchmarks/train_webshop_proof.py plot --out runs/webshop               # benchmarks/plots/webshop_*.svg

``sft --start runs/webshop/sft --sft-resume 400 --sft-max-steps 440`` continues the SFT checkpoint that had 400 steps
up to step 440 (the continued-SFT control of the confirmatory study), into ``OUT/sft-continued`` (``eval --models
sft,sft-continued`` plays it): SFT runs in chunks of ``--sft-chunk`` steps, each drawing its batches with its first
step as seed and starting a fresh optimizer (:func:`proof_common.chunks`), so the continued steps see the batches,
and take the steps, of a run from 0 to 440. A continuation trains to ``--sft-max-steps`` whatever its held-out success.

The env is ``AgentR1/WebShop-v0`` with ``source="generated"`` (1,000 products, catalogue seed 0, ``easy`` goals)
and a one-line system prompt (:data:`ENV_KWARGS`). An episode is several clicks: ``search[...]`` on the search page,
``click[<product>]`` on the results page, ``click[<option>]`` once per option the instruction names, then
``click[buy now]``; the reward is WebShop's score in [0, 1] at the purchase (success: score 1).

The expert is the rule shopper of the leaderboard (:class:`RuleShopperPolicy`): it searches the instruction without
its price clause, opens the first result under the price limit, clicks the options the instruction names, buys. It
reads only the page, so a model that reads the page can imitate it (the oracle searches the goal product's hidden
title, which a model cannot know); its episodes that end in success are the SFT data.

Tasks are reset seeds (the env draws the goal from its seed among 2**31 - 1 generated goals): SFT seeds
``0 .. N-1``, RL seeds from :data:`RL_FIRST`, monitoring seeds from :data:`MONITOR_FIRST` (128 held-out tasks, checked
during SFT and GRPO) and final seeds from :data:`FINAL_FIRST` (1,000 held-out tasks, used only by ``eval``). A held-out
seed whose instruction is the instruction of any SFT or RL task is skipped (the count is printed), so no held-out task
was trained on. Held-out play is greedy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from functools import cache
from pathlib import Path
from typing import Any

import study  # benchmarks/: provenance of every result, the confirmatory guard (--protocol)
from proof_common import (
    Curve,
    Limits,
    add_continuation_flags,
    budget_problem,
    continuation_problem,
    cpu_grpo_config,
    expert_sft_rows,
    flags_problem,
    greedy_episodes,
    load_checkpoint,
    model_paths,
    print_pairs,
    sft_in_chunks,
)

ENV_ID = "AgentR1/WebShop-v0"
SYSTEM = (
    "Buy what the instruction asks for: search[query], then click[...] on each page, and click[buy now] at the end."
)
ENV_KWARGS = {"source": "generated", "num_products": 1000, "seed": 0, "difficulty": "easy", "system_prompt": SYSTEM}
MAX_TURNS, MAX_NEW_TOKENS = 8, 48
MAX_PROMPT, MAX_COMPLETION = 256, 1024
RL_FIRST, RL_TASKS = 1_000_000, 10_000
MONITOR_FIRST, MONITOR_N = 2_000_000, 128
FINAL_FIRST, FINAL_N = 3_000_000, 1000
TOKENIZER_EPISODES = 300  # expert episodes the tokenizer is trained on
PROVENANCE: dict[str, Any] = {}  # study.start's record (commit, dirty, kernels, protocol), written with every result


def limits() -> Limits:
    """The episode bounds, read when called (a test may shorten them)."""
    return Limits(MAX_TURNS, MAX_NEW_TOKENS, MAX_PROMPT, MAX_COMPLETION)


@cache
def _env(role: str = "tasks") -> Any:
    """One env per role, built once: ``"tasks"`` reads instructions and records episodes, ``"expert"`` plays the
    expert's episodes to find its actions."""
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the ids)

    return gym.make(ENV_ID, **ENV_KWARGS)


def instruction(seed: int) -> str:
    env = _env()
    env.reset(seed=seed)
    return env.unwrapped.task.prompt


def expert_actions(task: Any) -> list[str]:
    """The rule shopper's actions on ``task``, played in a private env (the shopper is deterministic)."""
    from agentgym_r1.leaderboard.baselines.webshop import RuleShopperPolicy
    from agentgym_r1.trainers.sft import policy_actions

    return policy_actions(_env("expert"), RuleShopperPolicy(), MAX_TURNS)(task)


@cache
def trained_instructions(sft_episodes: int) -> frozenset[str]:
    return frozenset(
        {instruction(s) for s in range(sft_episodes)} | {instruction(RL_FIRST + i) for i in range(RL_TASKS)}
    )


def held_out_seeds(first: int, n: int, sft_episodes: int) -> tuple[list[int], dict[str, int]]:
    """The first ``n`` seeds from ``first`` whose instruction is not one of the SFT or RL tasks'; and the counts."""
    trained = trained_instructions(sft_episodes)
    seeds, skipped, s = [], 0, first
    while len(seeds) < n:
        if instruction(s) in trained:
            skipped += 1
        else:
            seeds.append(s)
        s += 1
    return seeds, {"held_out": n, "skipped_as_trained": skipped, "trained_instructions": len(trained)}


def products_seen(seeds: list[int], sft_episodes: int) -> float:
    """Share of held-out goals whose target product is also the target of a training task (same catalogue)."""
    env = _env()

    def asin(seed: int) -> str:
        env.reset(seed=seed)
        return env.unwrapped.task.meta["goal"].asin

    trained = {asin(s) for s in range(sft_episodes)} | {asin(RL_FIRST + i) for i in range(RL_TASKS)}
    return sum(asin(s) in trained for s in seeds) / len(seeds)


def play(model: Any, tokenizer: Any, seeds: list[int], chunk: int = 256) -> tuple[list[float], list[bool]]:
    """Greedy episodes on ``seeds``: each one's WebShop score (0 without a purchase) and success."""
    from agentgym_r1.adapters import Prompt

    episodes = greedy_episodes(
        model,
        tokenizer,
        [Prompt(ENV_ID, ENV_KWARGS, s) for s in seeds],
        limits(),
        chunk=chunk,
    )
    return [float(e.metrics.get("score", 0.0)) for e in episodes], [bool(e.success) for e in episodes]


def summary(scores: list[float], success: list[bool]) -> dict[str, Any]:
    """Mean score with its 95% t-interval and success rate with its 95% Wilson interval."""
    from agentgym_r1.leaderboard.board import mean_ci, wilson

    s, w = mean_ci(scores, (0.0, 1.0)), wilson(sum(success), len(success))
    return {
        "n": len(scores),
        "score": s.value,
        "score_ci": [s.low, s.high],
        "success": w.value,
        "success_ci": [w.low, w.high],
    }


def fmt(r: dict[str, Any]) -> str:
    return (
        f"score {r['score']:.3f} [{r['score_ci'][0]:.3f}, {r['score_ci'][1]:.3f}]  success "
        f"{100 * r['success']:.1f}% [{100 * r['success_ci'][0]:.1f}, {100 * r['success_ci'][1]:.1f}]  (n={r['n']})"
    )


def monitor(model: Any, tokenizer: Any, seeds: list[int]) -> dict[str, Any]:
    return summary(*play(model, tokenizer, seeds))


def start_model(start_from: Path | None, layers: int, vocab: int) -> tuple[Any, Any]:
    """The tokenizer and model SFT trains: the checkpoint ``start_from`` (a continuation), or a new tokenizer trained
    on :data:`TOKENIZER_EPISODES` expert episodes and a tiny Qwen2 for it."""
    if start_from is not None:
        return load_checkpoint(start_from)
    from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer

    env, texts = _env(), []
    for seed in range(TOKENIZER_EPISODES):
        play_expert(env, seed, expert_actions)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    tokenizer = train_tokenizer(texts, vocab_size=vocab, cross_spaces=True)
    return tokenizer, make_model(tokenizer, hidden=128, layers=layers, mlp_ratio=4)


def expert_episodes(tokenizer: Any, num_episodes: int) -> list[Any]:
    """The SFT data: the rule shopper's episodes on SFT tasks ``0 .. num_episodes - 1`` that end in success."""
    return expert_sft_rows(ENV_ID, ENV_KWARGS, range(num_episodes), tokenizer, expert_actions, "SFT tasks")


def run_sft(
    out: Path,
    target: float,
    chunk: int,
    max_steps: int,
    num_episodes: int,
    lr: float,
    batch: int,
    layers: int,
    vocab: int,
    minutes: float = math.inf,
    start_from: Path | None = None,
    resume: int = 0,
) -> None:
    """SFT from scratch into ``OUT/sft`` until ``target`` held-out success, ``max_steps`` or ``minutes``; or, with
    ``start_from`` and ``resume``, the checkpoint that had ``resume`` steps continued to ``max_steps`` into
    ``OUT/sft-continued`` (the same batches and steps as the run from 0: :func:`proof_common.chunks`)."""
    start = time.time()
    tokenizer, model = start_model(start_from, layers, vocab)
    model.train()
    print(f"tiny Qwen2: {sum(p.numel() for p in model.parameters())} parameters, {layers} layers", flush=True)
    episodes = expert_episodes(tokenizer, num_episodes)
    print(f"({time.time() - start:.0f}s)", flush=True)
    seeds, counts = held_out_seeds(MONITOR_FIRST, MONITOR_N, num_episodes)
    print(f"monitoring set: seeds {seeds[0]}..{seeds[-1]}, {counts}", flush=True)
    record = {
        "env_kwargs": ENV_KWARGS,
        "episodes": len(episodes),
        "num_episodes": num_episodes,
        "start": None if start_from is None else {"checkpoint": str(start_from), "steps": resume},
        "provenance": PROVENANCE,
    }
    sft_in_chunks(
        model,
        tokenizer,
        episodes,
        out,
        run={"chunk": chunk, "batch": batch, "lr": lr, "num_episodes": num_episodes},
        resume=resume,
        max_steps=max_steps,
        check=lambda model: monitor(model, tokenizer, seeds),
        stop=lambda point, seconds: point["success"] >= target or seconds >= minutes * 60,
        record=record,
        fmt=fmt,
    )


def protocol_problem(protocol: dict[str, Any], a: Any) -> str | None:
    """Why the parsed command ``a`` is not a run the protocol registered, or ``None``: a budget in updates or steps,
    never minutes (:func:`~proof_common.budget_problem`), and ``eval`` on the registered final set
    (``--final-first``/``--final`` equal to ``held_out.final_fresh``'s ``first_seed``/``tasks``)."""
    final = (protocol.get("held_out") or {}).get("final_fresh") or {}
    wanted = {"--final-first": final.get("first_seed"), "--final": final.get("tasks")}
    registered_set = "eval scores the registered set"
    eval_problem = a.phase == "eval" and flags_problem(a, wanted, registered_set, "held_out.final_fresh")
    return budget_problem(protocol, a) or eval_problem or None


def curve_callback(curve: Curve, minutes: float, every: int) -> Any:
    """Held-out monitoring (``curve``) every ``every`` steps, a stop after ``minutes`` of training (wall time less the
    held-out checks) and the learning rate on a cosine from its initial value to 0 over those minutes (as the GSM8K
    proof's ``--cosine``, in training time)."""
    from agentgym_r1.trainers.budget import WallClockBudget

    return WallClockBudget(minutes, evaluate=curve, every=every, count_evaluation=False)


def run_grpo(
    out: Path,
    minutes: float,
    every: int,
    lr: float,
    seed: int,
    prompts: int,
    generations: int,
    temperature: float,
    sft_episodes: int,
    monitor_n: int = MONITOR_N,
    steps: int | None = None,
) -> None:
    """GRPO from the SFT checkpoint for ``minutes`` of training time (the lr on a cosine over them) or, with
    ``steps``, for exactly that many updates (the lr on a cosine over them: a budget the machine's load cannot
    change)."""
    from datasets import Dataset

    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tokenizer, model = load_checkpoint(out / "sft")
    label = f"grpo-seed{seed}"
    args = cpu_grpo_config(
        out / label,
        env_id=ENV_ID,
        env_kwargs=ENV_KWARGS,
        limits=limits(),
        prompts=prompts,
        generations=generations,
        lr=lr,
        temperature=temperature,
        seed=seed,
        steps=steps,
    )
    tasks = Dataset.from_list([{"prompt": json.dumps({"seed": RL_FIRST + i})} for i in range(RL_TASKS)])
    seeds, counts = held_out_seeds(MONITOR_FIRST, monitor_n, sft_episodes)
    print(f"monitoring set: seeds {seeds[0]}..{seeds[-1]}, {counts}", flush=True)
    curve = Curve(lambda model: monitor(model, tokenizer, seeds), out / f"{label}_curve.json", fmt)
    if steps:
        from agentgym_r1.trainers.budget import EveryUpdates

        callback = EveryUpdates(curve, every, steps)
    else:
        callback = curve_callback(curve, minutes, every)
    trainer = AgentGRPOTrainer(model, args, tokenizer, train_dataset=tasks, callbacks=[callback])
    start = time.time()
    trainer.train()
    model.save_pretrained(out / label / "final")
    tokenizer.save_pretrained(out / label / "final")
    first, last = curve.points[0], curve.points[-1]
    print(
        f"{label}: {last['step']} steps, {last['seconds'] / 60:.1f} min training, {(time.time() - start) / 60:.1f} "
        f"min wall with the held-out checks; held-out (monitoring) "
        f"score {first['score']:.3f} -> {last['score']:.3f}, success {100 * first['success']:.1f}% -> "
        f"{100 * last['success']:.1f}%"
    )


def run_eval(
    out: Path,
    seed: int,
    sft_episodes: int,
    final_n: int = FINAL_N,
    which: str = "sft,grpo",
    final_first: int = FINAL_FIRST,
) -> None:
    """Greedy play of the SFT checkpoint, the GRPO run's final model and/or the continued SFT on the final held-out
    tasks (the first ``final_n`` untrained seeds from ``final_first``); each result in ``final_<label>.json`` with the
    overlap check, the per-task outcomes (each task's seed, score and success) and the provenance; then the paired
    comparisons of the results on these tasks (each against the start, GRPO against the continued SFT)."""
    seeds, counts = held_out_seeds(final_first, final_n, sft_episodes)
    counts["products_also_trained_share"] = products_seen(seeds, sft_episodes)
    print(f"final held-out set: seeds {seeds[0]}..{seeds[-1]}, {counts}", flush=True)
    models = model_paths(out, seed)
    for name in which.split(","):
        label, path = models[name]
        start = time.time()
        tokenizer, model = load_checkpoint(path)
        scores, success = play(model.eval(), tokenizer, seeds)
        result = summary(scores, success)
        print(f"{label}: final held-out {fmt(result)}  {time.time() - start:.0f}s", flush=True)
        (out / f"final_{label}.json").write_text(
            json.dumps(
                {
                    **result,
                    "seeds": [seeds[0], seeds[-1]],
                    "overlap": counts,
                    "per_task": {"seed": seeds, "score": scores, "success": success},
                    "provenance": PROVENANCE,
                },
                indent=1,
            )
        )
    print_pairs(out, seed, paired)


def paired_test(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """Two results on the same final tasks compared task by task (``None`` unless both hold per-task outcomes of the
    same tasks): the mean score difference (after - before) with its paired 95% t-interval and p, and the tasks only
    ``after`` solved (gained) or only ``before`` (lost) with McNemar's exact p."""
    from scipy.stats import ttest_rel

    from agentgym_r1.leaderboard.board import pair_outcomes

    a, b = before.get("per_task"), after.get("per_task")
    if a is None or b is None or len(a["score"]) != len(b["score"]) or before["seeds"] != after["seeds"]:
        return None
    if "seed" in a and "seed" in b and a["seed"] != b["seed"]:
        return None
    test = ttest_rel(b["score"], a["score"])
    ci = test.confidence_interval(0.95)
    success = pair_outcomes(a["success"], b["success"])
    diff = sum(b["score"]) / len(b["score"]) - sum(a["score"]) / len(a["score"])
    return {
        "tasks": len(a["score"]),
        "score": diff,
        "score_ci": [float(ci.low), float(ci.high)],
        "score_p": float(test.pvalue),
        "gained": success.gained,
        "lost": success.lost,
        "mcnemar_p": success.p,
    }


def paired(before: dict[str, Any], after: dict[str, Any]) -> str:
    """:func:`paired_test`, said in a line."""
    t = paired_test(before, after)
    if t is None:
        return "paired comparison: needs both evaluations' per-task results on the same tasks (re-run eval)"
    return (
        f"paired on {t['tasks']} tasks: score {t['score']:+.3f} [{t['score_ci'][0]:+.3f}, {t['score_ci'][1]:+.3f}] "
        f"(paired t, p={t['score_p']:.2g}); success: {t['gained']} tasks gained, {t['lost']} lost (McNemar exact "
        f"p={t['mcnemar_p']:.2g})"
    )


def run_plot(out: Path, plots: Path, seed: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots.mkdir(parents=True, exist_ok=True)
    sft_curve = json.loads((out / "sft_curve.json").read_text())["curve"]
    grpo = json.loads((out / f"grpo-seed{seed}_curve.json").read_text())
    final = {
        name: json.loads((out / f"final_{name}.json").read_text())
        for name in ("sft", f"grpo-seed{seed}")
        if (out / f"final_{name}.json").exists()
    }
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, points, x, xlabel, title in (
        (axes[0], sft_curve, "step", "SFT step (batch 16)", "SFT warm start (stopped early)"),
        (
            axes[1],
            grpo,
            "minutes",
            "GRPO training time (minutes; held-out checks excluded)",
            f"GRPO from the SFT checkpoint (seed {seed})",
        ),
    ):
        xs = [p["step"] if x == "step" else p["seconds"] / 60 for p in points]
        for key, colour in (("success", "tab:blue"), ("score", "tab:orange")):
            ax.plot(
                xs,
                [p[key] for p in points],
                marker="o",
                ms=3,
                color=colour,
                label=f"held-out {key} ({points[0]['n']} tasks)",
            )
            ax.fill_between(
                xs, [p[f"{key}_ci"][0] for p in points], [p[f"{key}_ci"][1] for p in points], color=colour, alpha=0.15
            )
        ax.set(xlabel=xlabel, ylim=(0, 1), title=title)
        ax.grid(alpha=0.3)
    if len(final) == 2:
        for key, colour, marker in (("success", "tab:blue", "s"), ("score", "tab:orange", "D")):
            for name, xpos in (("sft", 0.0), (f"grpo-seed{seed}", grpo[-1]["seconds"] / 60)):
                r = final[name]
                axes[1].errorbar(
                    [xpos],
                    [r[key]],
                    yerr=[[r[key] - r[f"{key}_ci"][0]], [r[f"{key}_ci"][1] - r[key]]],
                    fmt=marker,
                    color=colour,
                    mfc="white",
                    capsize=3,
                    label=f"{key} on {r['n']} final held-out" if name == "sft" else None,
                )
    axes[1].legend(fontsize=7, loc="lower right")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("WebShop (generated catalogue, 1k products): tiny Qwen2, SFT then GRPO on CPU", fontsize=10)
    fig.tight_layout()
    path = plots / "webshop_learning_curve.svg"
    fig.savefig(path)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["sft", "grpo", "eval", "plot"])
    parser.add_argument("--out", type=Path, default=Path("runs/webshop"))
    parser.add_argument("--plots", type=Path, default=Path("benchmarks/plots"))
    parser.add_argument("--minutes", type=float, default=15.0, help="GRPO wall-time budget")
    parser.add_argument("--steps", type=int, help="GRPO: exactly this many updates (lr on a cosine over them)")
    parser.add_argument("--final-first", type=int, default=FINAL_FIRST, help="eval: the first final held-out seed")
    parser.add_argument(
        "--protocol", type=Path, help="a confirmatory run: the committed protocol (benchmarks/study.py)"
    )
    parser.add_argument("--seed", type=int, default=0, help="GRPO: the trainer's seed (task order, sampling)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-every", type=int, default=10, help="GRPO steps between held-out checks")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate (cosine to 0 over --minutes)")
    parser.add_argument("--prompts", type=int, default=8, help="GRPO tasks per step")
    parser.add_argument("--generations", type=int, default=8, help="GRPO samples per task")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--monitor", type=int, default=MONITOR_N, help="GRPO: held-out tasks checked during training")
    parser.add_argument("--final", type=int, default=FINAL_N, help="eval: final held-out tasks")
    parser.add_argument("--models", default="sft,grpo", help="eval: which of sft, grpo, sft-continued to play")
    parser.add_argument("--sft-target", type=float, default=0.2, help="stop SFT at this held-out success")
    parser.add_argument("--sft-chunk", type=int, default=50)
    parser.add_argument("--sft-max-steps", type=int, default=2000)
    parser.add_argument("--sft-episodes", type=int, default=3000, help="SFT tasks (seeds 0..N-1)")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument(
        "--sft-minutes",
        type=float,
        default=math.inf,
        help="stop SFT after this many minutes even under --sft-target (the last chunk is saved)",
    )
    add_continuation_flags(parser)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2000)
    a = parser.parse_args()
    if a.steps is not None and a.steps < 1:
        parser.error(f"--steps must be at least 1, got {a.steps}")
    run = {"chunk": a.sft_chunk, "batch": a.sft_batch, "lr": a.sft_lr, "num_episodes": a.sft_episodes}
    problem = continuation_problem(a, run)
    if problem:
        parser.error(problem)
    PROVENANCE.update(study.start(__file__, a.out, a.protocol, a.seed if a.phase == "grpo" else None))
    problem = a.protocol and protocol_problem(study.read_protocol(a.protocol), a)
    if problem:
        parser.error(f"--protocol {a.protocol}: {problem}")
    import torch

    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.phase == "sft":
        run_sft(
            a.out,
            a.sft_target,
            a.sft_chunk,
            a.sft_max_steps,
            a.sft_episodes,
            a.sft_lr,
            a.sft_batch,
            a.layers,
            a.vocab,
            a.sft_minutes,
            a.start,
            a.sft_resume,
        )
    elif a.phase == "grpo":
        run_grpo(
            a.out,
            a.minutes,
            a.eval_every,
            a.lr,
            a.seed,
            a.prompts,
            a.generations,
            a.temperature,
            a.sft_episodes,
            a.monitor,
            a.steps,
        )
    elif a.phase == "eval":
        run_eval(a.out, a.seed, a.sft_episodes, a.final, a.models, a.final_first)
    else:
        run_plot(a.out, a.plots, a.seed)


if __name__ == "__main__":
    main()
