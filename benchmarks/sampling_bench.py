"""Dynamic sampling and the pass-rate curriculum against uniform sampling, on the ``hard`` level of GSM8K or HotpotQA
(issue 38, item 2).

One tiny model is fine-tuned on expert episodes of the three levels (the start), then trained with GRPO from that
start under each condition for the same number of *generated episodes* (every episode a rollout played counts,
including those dynamic sampling sets aside), and scored greedily on held-out ``hard`` problems that training never
sees (GSM8K: the generator seeded 1; HotpotQA: far reset seeds, any training question skipped and the overlap
checked before training). Conditions:

* ``uniform``: today's trainer on ``difficulty: hard`` (tasks uniform over the training data);
* ``dynamic``: the same with ``dynamic_sampling: true`` (groups whose rewards are all equal refilled);
* ``dynamic-success``: the same with ``dynamic_sampling_filter: success`` (DAPO's filter: groups whose samples all
  succeed or all fail refilled; a shaped reward's penalties cannot keep a group);
* ``curriculum``: ``curriculum: pass_rate`` over easy / medium / hard, band [0.2, 0.8];
* ``levels`` (the curriculum's control): the three levels drawn uniformly (``curriculum_explore: 1``, so the band
  changes nothing): is a gain the band's, or only that of easier tasks?

Every condition's held-out episodes are the same problems, so each is paired with ``uniform`` and with the start
(McNemar's exact test, :func:`agentgym_r1.leaderboard.board.mcnemar`; Wilson intervals). Wall time is reported beside
each, not equalised. Phases write ``OUT/<phase>.json``, so a run cut short keeps what finished; ``sft --env`` picks
the env, and the later phases read it from ``OUT/sft.json``.

    PYTHONPATH=. python benchmarks/sampling_bench.py all --out runs/sampling      # sft, the conditions, the report
    PYTHONPATH=. python benchmarks/sampling_bench.py sft --env hotpotqa --out runs/sampling-hotpotqa \
        --hidden 128 --layers 4 --sft-steps 1500 --demos 8000                     # HotpotQA's start
    PYTHONPATH=. python benchmarks/sampling_bench.py dev --out runs/sampling-hotpotqa   # its strength, every level
    PYTHONPATH=. python benchmarks/sampling_bench.py report --out runs/sampling   # the table of what finished
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import hotpotqa_proof_tasks as hotpot  # benchmarks/: the HotpotQA proof's env and expert
import torch

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters import ChatTokenizer, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.hf import HFBackend
from agentgym_r1.envs.gsm8k.expert import expert_actions as gsm8k_expert_actions
from agentgym_r1.leaderboard.board import pair_outcomes, wilson


@dataclass(frozen=True)
class Bench:
    """One env's benchmark: the env and its limits, the start's model and SFT, and where its held-out and
    development problems come from. ``held`` and ``dev`` give, for ``n``, the env kwargs and reset seeds of the
    ``hard`` problems scored at the end and of the problems a start is checked on (``dev``, every level)."""

    name: str
    env_id: str
    base: dict[str, Any]
    max_turns: int
    max_new_tokens: int
    completion: int
    vocab: int
    train_pool: int  # GRPO's tasks are reset seeds 0 .. train_pool - 1 (``num_tasks``); SFT's demos are among them
    expert: Callable[[Any], list[str]]
    held: Callable[[Path, int], tuple[dict[str, Any], list[int]]]
    dev: Callable[[Path, str, int], tuple[dict[str, Any], list[int]]]

    def conditions(self) -> dict[str, dict[str, Any]]:
        hard = {**self.base, "difficulty": "hard"}
        return {
            "uniform": {"env_kwargs": hard},
            "dynamic": {"env_kwargs": hard, "dynamic_sampling": True, "dynamic_sampling_max_tries": 3},
            "dynamic-success": {
                "env_kwargs": hard,
                "dynamic_sampling": True,
                "dynamic_sampling_max_tries": 3,
                "dynamic_sampling_filter": "success",
            },
            "curriculum": {"env_kwargs": self.base, "curriculum": "pass_rate", "curriculum_band": [0.2, 0.8]},
            "levels": {"env_kwargs": self.base, "curriculum": "pass_rate", "curriculum_explore": 1.0},
        }


LEVELS = ("easy", "medium", "hard")
CONDITIONS = ("uniform", "dynamic", "dynamic-success", "curriculum", "levels")

# GSM8K: held-out hard problems come from another generator (seeded 1), the development ones from a third.
GSM8K_BASE = {"source": "synthetic", "system_prompt": "Solve it."}
HELD_OUT = {**GSM8K_BASE, "difficulty": "hard", "seed": 1}
DEV_SEED = 5  # the generator the start's strength is checked on (``dev``): never the held-out seed 1


GSM8K = Bench(
    name="gsm8k",
    env_id="AgentR1/GSM8K-v0",
    base=GSM8K_BASE,
    max_turns=6,  # a hard problem is 4-5 calculator steps and the answer
    max_new_tokens=40,
    completion=320,
    vocab=800,
    train_pool=100_000,
    expert=gsm8k_expert_actions,
    held=lambda out, n: (HELD_OUT, list(range(n))),
    dev=lambda out, level, n: ({**GSM8K_BASE, "difficulty": level, "seed": DEV_SEED}, list(range(n))),
)

# HotpotQA: one knowledge base (the proof's: generator seeded 0, 5,000 entities), so held-out questions are drawn
# from far reset seeds, skipping any question that a training seed draws at any level (`hotpot_questions`).
HOTPOT_BASE = {k: v for k, v in hotpot.ENV_KWARGS.items() if k != "difficulty"}  # the proof's env, every level
HOTPOT_TRAIN = hotpot.TRAIN_SEEDS  # the proof's training seeds, 0 .. 7,999
HOTPOT_HELD_FROM, HOTPOT_DEV_FROM = 6_000_000, 7_000_000  # seeds no earlier HotpotQA run drew (hotpotqa_splits.py)


def hotpot_tasks(level: str, seeds: Sequence[int]) -> list[Any]:
    return hotpot.questions(seeds, {**HOTPOT_BASE, "difficulty": level})


@functools.cache
def hotpot_training() -> list[Any]:
    """Every question training can draw: reset seeds ``0 .. HOTPOT_TRAIN - 1`` at every level."""
    return [t for lv in LEVELS for t in hotpot_tasks(lv, list(range(HOTPOT_TRAIN)))]


def hotpot_questions(out: Path, name: str, level: str, first: int, n: int) -> tuple[dict[str, Any], list[int]]:
    """The first ``n`` reset seeds from ``first`` whose ``level`` question is new: no training question (reset seeds
    ``0 .. HOTPOT_TRAIN - 1``, any level) and no repeat. Cached in ``OUT/questions.json``; checked with
    ``hotpotqa_splits.check_overlap`` (``HeldOutOverlapError`` names an overlap) before it is used."""
    import hotpotqa_splits as splits  # benchmarks/: the scan for new questions and the overlap check

    key = f"{name}-{level}-{first}-{n}"
    path = out / "questions.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    train = hotpot_training()
    if key not in cache:
        skip = {t.prompt for t in train}
        cache[key] = splits.scan(lambda seeds: hotpot_tasks(level, seeds), first, n, lambda task: True, skip, key)
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache))
    splits.check_overlap(key, hotpot_tasks(level, cache[key]), train)
    return {**HOTPOT_BASE, "difficulty": level}, cache[key]


HOTPOTQA = Bench(
    name="hotpotqa",
    env_id="AgentR1/HotpotQA-v0",
    base=HOTPOT_BASE,
    max_turns=5,  # a hard question is up to four searches (a bridged comparison) and the answer
    max_new_tokens=32,
    completion=512,  # three or four passages: about 1.5x the proof's easy episodes (320)
    vocab=1000,
    train_pool=HOTPOT_TRAIN,
    expert=hotpot.expert_actions,
    held=lambda out, n: hotpot_questions(out, "held", "hard", HOTPOT_HELD_FROM, n),
    dev=lambda out, level, n: hotpot_questions(out, "dev", level, HOTPOT_DEV_FROM, n),
)
BENCHES = {b.name: b for b in (GSM8K, HOTPOTQA)}


def provenance(out: Path) -> dict[str, Any]:
    """The commit, dirty flag and kernel variables of the run (``study.provenance``; the run directory not counted)."""
    import study  # benchmarks/: provenance of every result

    root = study.repo_root(Path(__file__).resolve().parent)
    return study.provenance(root, out.resolve())


def save(out: Path, name: str, row: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(row, indent=1))


def bench_of(out: Path) -> Bench:
    """The bench a run directory was started with (its ``sft.json``); GSM8K for runs made before it was recorded."""
    path = out / "sft.json"
    return BENCHES[json.loads(path.read_text()).get("env", "gsm8k")] if path.exists() else GSM8K


def score(model: Any, tokenizer: Any, bench: Bench, env_kwargs: dict[str, Any], seeds: list[int]) -> list[bool]:
    """Greedy success on the problems that ``seeds`` (reset seeds) draw from ``env_kwargs``, in order."""
    chat = ChatTokenizer(tokenizer)
    config = RolloutConfig(
        max_turns=bench.max_turns,
        max_context_tokens=1024 + bench.completion,
        max_completion_tokens=bench.completion,
        seed=None,
        sampling=SamplingParams(max_new_tokens=bench.max_new_tokens, temperature=0.0),
    )
    was_training = model.training
    engine = RolloutEngine(HFBackend(model, chat, neutral=True), chat, config)
    try:
        batch = engine.rollout([{"env": bench.env_id, "env_kwargs": env_kwargs, "seed": s} for s in seeds])
    finally:
        engine.close()
        model.train(was_training)
    return [bool(e.success) for e in batch.episodes]


def run_sft(
    out: Path,
    steps: int,
    demos: int,
    held: int,
    size: tuple[int, int] = (96, 2),
    bench: Bench = GSM8K,
    batch_size: int = 16,
    lr: float = 3e-3,
    schedule: str = "constant_with_warmup",
) -> None:
    """The start: a tokenizer and a tiny Qwen2 model, fine-tuned on expert episodes of the three levels (reset seed
    ``s`` plays level ``s % 3``, for the tokenizer's 150 transcripts and the ``demos`` SFT episodes alike)."""
    from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer
    from agentgym_r1.trainers.sft import expert_rows, sft

    if demos > bench.train_pool:
        raise SystemExit(f"--demos is at most {bench.train_pool} for {bench.name} (its training reset seeds)")
    held_kwargs, held_seeds = bench.held(out, held)  # the overlap check, before any training
    record = provenance(out)  # the code that runs, before the tree can change under it
    t0 = time.time()
    envs = [gym.make(bench.env_id, **bench.base, difficulty=level) for level in LEVELS]
    texts = []
    for seed in range(150):
        env = envs[seed % 3]
        play_expert(env, seed, bench.expert)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    tokenizer = train_tokenizer(texts, vocab_size=bench.vocab, split_digits=True, cross_spaces=True)
    model = make_model(tokenizer, hidden=size[0], layers=size[1], mlp_ratio=4, seed=0).train()
    rows = [
        row
        for i, level in enumerate(LEVELS)
        for row in expert_rows(
            bench.env_id, {**bench.base, "difficulty": level}, range(i, demos, 3), tokenizer, bench.expert
        ).samples
    ]
    sft(model, tokenizer, rows, steps=steps, batch_size=batch_size, lr=lr, schedule=schedule, seed=0)
    model.save_pretrained(out / "sft")
    tokenizer.save_pretrained(out / "sft")
    seconds = time.time() - t0
    success = score(model, tokenizer, bench, held_kwargs, held_seeds)
    row = {
        "env": bench.name,
        "steps": steps,
        "demos": demos,
        "batch_size": batch_size,
        "lr": lr,
        "schedule": schedule,
        "hidden": size[0],
        "layers": size[1],
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        "provenance": record,
    }
    save(out, "sft", {**row, "held_out": success})
    print(f"sft: {steps} steps, held-out hard {sum(success)}/{held}, {seconds:.0f}s", flush=True)


def run_dev(out: Path, n: int) -> None:
    """The start's greedy success on ``n`` development problems of each level (never the held-out ones): how strong
    a start is, judged without the held-out set."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    bench = bench_of(out)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft")
    row = {lv: sum(score(model, tokenizer, bench, *bench.dev(out, lv, n))) for lv in LEVELS}
    where = {"seed": DEV_SEED} if bench is GSM8K else {"reset_seeds_from": HOTPOT_DEV_FROM}
    save(out, "dev", {"n": n, **where, "solved": row})
    print(f"start on the development problems ({where}), solved of {n}: {row}", flush=True)


def run_condition(
    out: Path, name: str, episodes: int, held: int, lr: float, seed: int, temperature: float = 1.0
) -> None:
    """GRPO from the start under one condition until ``episodes`` episodes were generated; the held-out score."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback

    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    bench = bench_of(out)
    condition = bench.conditions()[name]
    held_kwargs, held_seeds = bench.held(out, held)  # the overlap check, before any training
    record = provenance(out)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft").train()
    args = AgentGRPOConfig(
        output_dir=str(out / f"grpo-{name}"),
        env_id=bench.env_id,
        **condition,
        max_turns=bench.max_turns,
        max_new_tokens=bench.max_new_tokens,
        max_completion_length=bench.completion,
        num_generations=4,
        per_device_train_batch_size=32,
        learning_rate=lr,
        lr_scheduler_type="constant",
        beta=0.0,
        temperature=temperature,
        max_steps=10_000,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        use_cpu=True,
        num_tasks=bench.train_pool,
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
    success = score(model, tokenizer, bench, held_kwargs, held_seeds)
    row = {
        "condition": name,
        "config": dict(condition),
        "lr": lr,
        "temperature": temperature,
        "seed": seed,
        "updates": trainer.state.global_step,
        "episodes": trainer.sampling.generated,
        "train_seconds": seconds,
        "threads": torch.get_num_threads(),
        "provenance": record,
        "held_out": success,
        "log": history,
    }
    save(out, result_name(name, seed), row)
    print(
        f"{result_name(name, seed)}: {row['updates']} updates, {row['episodes']} episodes, {seconds:.0f}s, "
        f"held-out hard {sum(success)}/{held}",
        flush=True,
    )


def result_name(name: str, seed: int) -> str:
    """A condition's result file's stem: ``name`` for seed 0 (the first runs' files), ``name-seedN`` else."""
    return name if seed == 0 else f"{name}-seed{seed}"


def report(out: Path) -> None:
    """The Markdown table of what finished: success with its Wilson interval, and McNemar against uniform of the same
    seed and against the start (gained / lost: problems solved only by the row / only by the other)."""
    rows = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.stem not in ("dev", "questions")}
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
    seeds = sorted({r.get("seed", 0) for k, r in rows.items() if k != "sft"} or {0})
    for seed in seeds:
        base = rows.get(result_name("uniform", seed), {}).get("held_out")
        for name in CONDITIONS:
            label = result_name(name, seed)
            if label not in rows:
                print(f"| {label} | not run | | | | | |")
                continue
            r, succ = rows[label], rows[label]["held_out"]
            s = wilson(sum(succ), len(succ))
            print(
                f"| {label} | {r['updates']} | {r['episodes']} | {r['train_seconds'] / 60:.1f} min | "
                f"{100 * s.value:.1f}% [{100 * s.low:.1f}, {100 * s.high:.1f}] ({sum(succ)}/{len(succ)}) | "
                f"{paired(succ, base) if base and name != 'uniform' else ''} | {paired(succ, start)} |"
            )
    if bench_of(out) is HOTPOTQA:  # the rows in the table's order
        order = ["sft"] + [result_name(name, seed) for seed in seeds for name in CONDITIONS]
        by_type(out, {k: rows[k]["held_out"] for k in order if k in rows})


def by_type(out: Path, outcomes: dict[str, list[bool]]) -> None:
    """HotpotQA: each row's held-out successes by question type (a yes/no comparison is solved half the time by a
    guess, so a row's total can move with its guesses alone)."""
    kwargs, seeds = HOTPOTQA.held(out, len(outcomes["sft"]))
    types = [hotpot.question_type(t) for t in hotpot_tasks(kwargs["difficulty"], seeds)]
    names = sorted(set(types))
    print(f"\n| run | {' | '.join(f'{n} (of {types.count(n)})' for n in names)} |")
    print(f"|---|{'---|' * len(names)}")
    for label, succ in outcomes.items():
        solved = [sum(ok for ok, t in zip(succ, types, strict=True) if t == n) for n in names]
        print(f"| {'start (SFT)' if label == 'sft' else label} | {' | '.join(map(str, solved))} |")


def paired(after: list[bool], before: list[bool]) -> str:
    test = pair_outcomes(before, after)
    return f"+{test.gained} / -{test.lost}, p = {test.p:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["all", "sft", "dev", *CONDITIONS, "report"])
    parser.add_argument("--env", choices=list(BENCHES), default="gsm8k", help="sft: the env (later phases read it)")
    parser.add_argument("--out", type=Path, default=Path("runs/sampling"))
    parser.add_argument("--sft-steps", type=int, default=400)
    parser.add_argument("--demos", type=int, default=1500, help="expert episodes, the levels in turn")
    parser.add_argument("--episodes", type=int, default=384, help="generated episodes per condition")
    parser.add_argument("--held-out", type=int, default=200, help="held-out hard problems")
    parser.add_argument("--hidden", type=int, default=96, help="the start model's width")
    parser.add_argument("--layers", type=int, default=2, help="the start model's layers")
    parser.add_argument("--dev", type=int, default=100, help="development problems per level (phase dev)")
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-schedule", default="constant_with_warmup", help="sft: the rate's schedule (TRL's names)")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=1.0, help="the rollouts' sampling temperature")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if a.phase in ("all", "sft") and not (a.out / "sft.json").exists():
        run_sft(
            a.out,
            a.sft_steps,
            a.demos,
            a.held_out,
            (a.hidden, a.layers),
            BENCHES[a.env],
            a.sft_batch,
            a.sft_lr,
            a.sft_schedule,
        )
    if a.phase == "dev":
        run_dev(a.out, a.dev)
        return
    names = a.conditions if a.phase == "all" else [a.phase] if a.phase in CONDITIONS else []
    for name in names:
        if not (a.out / f"{result_name(name, a.seed)}.json").exists():
            run_condition(a.out, name, a.episodes, a.held_out, a.lr, a.seed, a.temperature)
    report(a.out)


if __name__ == "__main__":
    main()
