"""Dynamic sampling and the pass-rate curriculum against uniform sampling, on GSM8K's ``hard`` level (issue 38, item 2).

One tiny model is fine-tuned on expert episodes of the three levels (the start), then trained with GRPO from that
start under each condition for the same number of *generated episodes* (every episode a rollout played counts,
including those dynamic sampling sets aside), and scored greedily on held-out ``hard`` problems (the generator
seeded 1, which training never sees). Conditions:

* ``uniform``: today's trainer on ``difficulty: hard`` (tasks uniform over the training data);
* ``dynamic``: the same with ``dynamic_sampling: true`` (groups whose rewards are all equal refilled);
* ``curriculum``: ``curriculum: pass_rate`` over easy / medium / hard, band [0.2, 0.8];
* ``levels`` (the curriculum's control): the three levels drawn uniformly (``curriculum_explore: 1``, so the band
  changes nothing): is a gain the band's, or only that of easier tasks?

Every condition's held-out episodes are the same problems, so each is paired with ``uniform`` and with the start
(McNemar's exact test, :func:`agentgym_r1.leaderboard.board.mcnemar`; Wilson intervals). Wall time is reported beside
each, not equalised. Phases write ``OUT/<phase>.json``, so a run cut short keeps what finished.

    PYTHONPATH=. python benchmarks/sampling_bench.py all --out runs/sampling      # sft, the conditions, the report
    PYTHONPATH=. python benchmarks/sampling_bench.py report --out runs/sampling   # the table of what finished
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters import ChatTokenizer, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.hf import HFBackend
from agentgym_r1.leaderboard.board import pair_outcomes, wilson

ENV_ID = "AgentR1/GSM8K-v0"
BASE = {"source": "synthetic", "system_prompt": "Solve it."}
LEVELS = ("easy", "medium", "hard")
HELD_OUT = {**BASE, "difficulty": "hard", "seed": 1}
DEV_SEED = 5  # the generator the start's strength is checked on (``dev``): never the held-out seed 1
MAX_TURNS, MAX_NEW_TOKENS, COMPLETION = 6, 40, 320
HARD = {**BASE, "difficulty": "hard"}
CONDITIONS: dict[str, dict[str, Any]] = {
    "uniform": {"env_kwargs": HARD},
    "dynamic": {"env_kwargs": HARD, "dynamic_sampling": True, "dynamic_sampling_max_tries": 3},
    "curriculum": {"env_kwargs": BASE, "curriculum": "pass_rate", "curriculum_band": [0.2, 0.8]},
    "levels": {"env_kwargs": BASE, "curriculum": "pass_rate", "curriculum_explore": 1.0},
}


def save(out: Path, name: str, row: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(row, indent=1))


def held_out(model: Any, tokenizer: Any, n: int, env_kwargs: dict[str, Any] = HELD_OUT) -> list[bool]:
    """Greedy success on problems 0 .. n-1 of ``env_kwargs`` (the held-out hard problems by default: the generator
    seeded 1), in order."""
    chat = ChatTokenizer(tokenizer)
    config = RolloutConfig(
        max_turns=MAX_TURNS,
        max_context_tokens=1024 + COMPLETION,
        max_completion_tokens=COMPLETION,
        seed=None,
        sampling=SamplingParams(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0),
    )
    was_training = model.training
    engine = RolloutEngine(HFBackend(model, chat, neutral=True), chat, config)
    try:
        batch = engine.rollout([{"env": ENV_ID, "env_kwargs": env_kwargs, "seed": s} for s in range(n)])
    finally:
        engine.close()
        model.train(was_training)
    return [bool(e.success) for e in batch.episodes]


def run_sft(out: Path, steps: int, demos: int, held: int, size: tuple[int, int] = (96, 2)) -> None:
    """The start: a tokenizer and a tiny Qwen2 model, fine-tuned on expert episodes of the three levels (in turn)."""
    from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer
    from agentgym_r1.envs.gsm8k.expert import expert_actions
    from agentgym_r1.trainers.sft import expert_rows, sft

    t0 = time.time()
    envs = [gym.make(ENV_ID, **BASE, difficulty=level) for level in LEVELS]
    texts = []
    for seed in range(150):
        env = envs[seed % 3]
        play_expert(env, seed, expert_actions)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    tokenizer = train_tokenizer(texts, vocab_size=800, split_digits=True, cross_spaces=True)
    model = make_model(tokenizer, hidden=size[0], layers=size[1], mlp_ratio=4, seed=0).train()
    rows = [  # reset seed s plays level s % 3, as the tokenizer's transcripts do
        row
        for i, level in enumerate(LEVELS)
        for row in expert_rows(
            ENV_ID, {**BASE, "difficulty": level}, range(i, demos, 3), tokenizer, expert_actions
        ).samples
    ]
    sft(model, tokenizer, rows, steps=steps, batch_size=16, lr=3e-3, seed=0)
    model.save_pretrained(out / "sft")
    tokenizer.save_pretrained(out / "sft")
    success = held_out(model, tokenizer, held)
    row = {"steps": steps, "demos": demos, "hidden": size[0], "layers": size[1], "seconds": time.time() - t0}
    save(out, "sft", {**row, "held_out": success})
    print(f"sft: {steps} steps, held-out hard {sum(success)}/{held}, {time.time() - t0:.0f}s", flush=True)


def run_dev(out: Path, n: int) -> None:
    """The start's greedy success on problems 0 .. n-1 of each level of the development generator (seeded
    :data:`DEV_SEED`): how strong a start is, judged without the held-out set."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft")
    row = {lv: sum(held_out(model, tokenizer, n, {**BASE, "difficulty": lv, "seed": DEV_SEED})) for lv in LEVELS}
    save(out, "dev", {"n": n, "seed": DEV_SEED, "solved": row})
    print(f"start on the development generator (seed {DEV_SEED}), solved of {n}: {row}", flush=True)


def run_condition(out: Path, name: str, episodes: int, held: int, lr: float, seed: int) -> None:
    """GRPO from the start under one condition until ``episodes`` episodes were generated; the held-out score."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback

    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft").train()
    args = AgentGRPOConfig(
        output_dir=str(out / f"grpo-{name}"),
        env_id=ENV_ID,
        **CONDITIONS[name],
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        max_completion_length=COMPLETION,
        num_generations=4,
        per_device_train_batch_size=32,
        learning_rate=lr,
        lr_scheduler_type="constant",
        beta=0.0,
        temperature=1.0,
        max_steps=10_000,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        use_cpu=True,
        num_tasks=100_000,
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
    )
    history: list[dict[str, Any]] = []

    class Budget(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            control.should_training_stop = trainer.sampling.generated >= episodes

        def on_log(self, args, state, control, logs=None, **kw):
            kept = {k: v for k, v in (logs or {}).items() if k.startswith(("sampling/", "curriculum/", "env/"))}
            if kept:
                history.append({"step": state.global_step, **kept})

    trainer = AgentGRPOTrainer(model, args, tokenizer, callbacks=[Budget()])
    t0 = time.time()
    trainer.train()
    seconds = time.time() - t0
    success = held_out(model, tokenizer, held)
    row = {
        "condition": name,
        "config": {k: v for k, v in CONDITIONS[name].items()},
        "updates": trainer.state.global_step,
        "episodes": trainer.sampling.generated,
        "train_seconds": seconds,
        "held_out": success,
        "log": history,
    }
    save(out, name, row)
    print(
        f"{name}: {row['updates']} updates, {row['episodes']} episodes, {seconds:.0f}s, "
        f"held-out hard {sum(success)}/{held}",
        flush=True,
    )


def report(out: Path) -> None:
    """The Markdown table of what finished: success with its Wilson interval, and McNemar against uniform and the
    start (gained / lost: problems solved only by the row / only by the other)."""
    rows = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.stem != "dev"}
    if "sft" not in rows:
        print("nothing finished yet")
        return
    start = rows["sft"]["held_out"]
    print(
        "| run | updates | generated episodes | train wall time | held-out hard success [95% CI] | vs uniform "
        "(gained/lost, McNemar p) | vs start (gained/lost, p) |"
    )
    print("|---|---|---|---|---|---|---|")
    s = wilson(sum(start), len(start))
    print(
        f"| start (SFT) | | | | {100 * s.value:.1f}% [{100 * s.low:.1f}, {100 * s.high:.1f}] "
        f"({sum(start)}/{len(start)}) | | |"
    )
    base = rows.get("uniform", {}).get("held_out")
    for name in CONDITIONS:
        if name not in rows:
            print(f"| {name} | not run | | | | | |")
            continue
        r, succ = rows[name], rows[name]["held_out"]
        s = wilson(sum(succ), len(succ))
        print(
            f"| {name} | {r['updates']} | {r['episodes']} | {r['train_seconds'] / 60:.1f} min | "
            f"{100 * s.value:.1f}% [{100 * s.low:.1f}, {100 * s.high:.1f}] ({sum(succ)}/{len(succ)}) | "
            f"{paired(succ, base) if base and name != 'uniform' else ''} | {paired(succ, start)} |"
        )


def paired(after: list[bool], before: list[bool]) -> str:
    test = pair_outcomes(before, after)
    return f"+{test.gained} / -{test.lost}, p = {test.p:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["all", "sft", "dev", *CONDITIONS, "report"])
    parser.add_argument("--out", type=Path, default=Path("runs/sampling"))
    parser.add_argument("--sft-steps", type=int, default=400)
    parser.add_argument("--demos", type=int, default=1500, help="expert episodes, the levels in turn")
    parser.add_argument("--episodes", type=int, default=384, help="generated episodes per condition")
    parser.add_argument("--held-out", type=int, default=200, help="held-out hard problems")
    parser.add_argument("--hidden", type=int, default=96, help="the start model's width")
    parser.add_argument("--layers", type=int, default=2, help="the start model's layers")
    parser.add_argument("--dev", type=int, default=100, help="development problems per level (phase dev)")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if a.phase in ("all", "sft") and not (a.out / "sft.json").exists():
        run_sft(a.out, a.sft_steps, a.demos, a.held_out, (a.hidden, a.layers))
    if a.phase == "dev":
        run_dev(a.out, a.dev)
        return
    names = a.conditions if a.phase == "all" else [a.phase] if a.phase in CONDITIONS else []
    for name in names:
        if not (a.out / f"{name}.json").exists():
            run_condition(a.out, name, a.episodes, a.held_out, a.lr, a.seed)
    report(a.out)


if __name__ == "__main__":
    main()
