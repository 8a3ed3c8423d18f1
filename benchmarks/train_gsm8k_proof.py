"""Proof of learning on CPU: a tiny model warm-started on expert GSM8K episodes, then trained with GRPO (or PPO).

Phases (each prints what it measured and writes it to ``OUT/results/<run>.json`` with its ``provenance``: ``git
rev-parse HEAD`` and a dirty-tree flag; ``--protocol FILE`` makes a run confirmatory, see ``benchmarks/study.py``):

    python benchmarks/train_gsm8k_proof.py sft  --out runs/proof          # tokenizer, tiny Qwen2, SFT checkpoint
    python benchmarks/train_gsm8k_proof.py grpo --out runs/proof          # GRPO from the SFT checkpoint
    python benchmarks/train_gsm8k_proof.py grpo --out runs/proof --no-loss-mask   # the same with loss_mask=false
    python benchmarks/train_gsm8k_proof.py ppo  --out runs/proof          # multi-turn PPO from the same checkpoint

The env is ``AgentR1/GSM8K-v0`` with ``source="synthetic"``, one calculator step per problem and a one-line system
prompt (the tool instructions follow it). Training draws problems from the generator seeded 0; held-out success is
greedy decoding on problems of the generator seeded 1, which training never sees.

SFT runs in chunks and stops at the first chunk whose held-out success reaches ``--sft-target`` (default 0.15), so
the warm start solves at most 30% of held-out tasks. RL then runs until ``--minutes`` have passed.

The defaults rebuild the first setup (2 layers, 2000 expert episodes), whose SFT plateaus near 30% held-out, so RL
has little room; ``--layers 4 --sft-episodes 20000`` is the setup that reaches 70% under continued SFT and is the
one stopped early (see benchmarks/reports/gsm8k_proof.md for the exact commands and figures).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import study  # benchmarks/: provenance of every result, the confirmatory guard (--protocol)
import torch

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters import ChatTokenizer, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.hf import HFBackend
from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer
from agentgym_r1.envs.gsm8k.expert import expert_actions
from agentgym_r1.trainers.sft import expert_rows, sft

ENV_ID = "AgentR1/GSM8K-v0"
ENV_KWARGS = {"source": "synthetic", "min_steps": 1, "max_steps": 1, "system_prompt": "Solve it."}
HELD_OUT = {**ENV_KWARGS, "seed": 1}
MAX_TURNS, MAX_NEW_TOKENS = 3, 40
FINAL_FIRST = 1000  # the final check's held-out problems start here (the monitoring ones are 0..127)
PROVENANCE: dict[str, Any] = {}  # study.start's record (commit, dirty, protocol), written with every result


def save_result(out: Path, label: str, **row: Any) -> None:
    """``OUT/results/<label>.json``: what a phase measured, with the code's provenance."""
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / f"{label}.json").write_text(
        json.dumps({"run": label, **row, "provenance": PROVENANCE}, indent=1)
    )


def held_out_success(model, tokenizer, episodes: int = 128, first: int = 0) -> float:
    """Greedy success on held-out problems ``first .. first + episodes - 1`` of the generator seeded 1."""
    return sum(solved(model, tokenizer, HELD_OUT["seed"], range(first, first + episodes))) / episodes


def solved(model, tokenizer, generator_seed: int, seeds: Sequence[int]) -> list[bool]:
    """Whether greedy decoding solves each problem of ``seeds`` (reset seeds) of the generator ``generator_seed``,
    in the order of ``seeds``; the model's training mode is restored after."""
    chat = ChatTokenizer(tokenizer)
    config = RolloutConfig(
        max_turns=MAX_TURNS,
        max_context_tokens=1024 + 512,
        max_completion_tokens=512,
        seed=None,
        sampling=SamplingParams(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0),
    )
    was_training = model.training
    engine = RolloutEngine(HFBackend(model, chat, neutral=True), chat, config)
    kwargs = {**ENV_KWARGS, "seed": generator_seed}
    try:
        batch = engine.rollout([{"env": ENV_ID, "env_kwargs": kwargs, "seed": s} for s in seeds])
    finally:
        engine.close()
        model.train(was_training)
    by_seed = {e.seed: e.success for e in batch.episodes}
    return [bool(by_seed[s]) for s in seeds]


def run_sft(
    out: Path,
    target: float,
    chunk: int,
    max_steps: int,
    resume: int = 0,
    num_episodes: int = 2000,
    lr: float = 3e-3,
    batch: int = 16,
    layers: int = 2,
) -> None:
    env = gym.make(ENV_ID, **ENV_KWARGS)
    texts = []
    for seed in range(300):
        play_expert(env, seed, expert_actions)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    if resume:  # continue the SFT of an earlier checkpoint (same tokenizer, same expert episodes)
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
        model = AutoModelForCausalLM.from_pretrained(out / "sft")
    else:
        tokenizer = train_tokenizer(texts, vocab_size=1000, split_digits=True, cross_spaces=True)
        model = make_model(tokenizer, hidden=128, layers=layers, mlp_ratio=4).train()
    episodes = expert_rows(ENV_ID, ENV_KWARGS, range(num_episodes), tokenizer, expert_actions).samples
    print(
        f"tiny Qwen2: {sum(p.numel() for p in model.parameters())} parameters, vocab {len(tokenizer)}, "
        f"{len(episodes)} expert episodes, prompt {len(episodes[0].prompt_ids)} tokens"
    )
    start, steps, success = time.time(), resume, 0.0
    while steps < max_steps:
        sft(model, tokenizer, episodes, steps=chunk, batch_size=batch, lr=lr, seed=steps)
        steps += chunk
        success = held_out_success(model, tokenizer)
        print(f"sft step {steps:4d}  held-out success {success:.3f}  {time.time() - start:.0f}s", flush=True)
        if success >= target:
            break
    model.save_pretrained(out / "sft")
    tokenizer.save_pretrained(out / "sft")
    print(f"SFT checkpoint: {out / 'sft'}  steps {steps}  held-out success {success:.3f}")
    save_result(out, "sft", steps=steps, monitor=success, minutes=(time.time() - start) / 60)


class HeldOut:
    """The held-out success along a run, as ``(step, seconds, success)``: the ``evaluate`` of
    :class:`~agentgym_r1.trainers.budget.WallClockBudget`, which stops the run and sets the lr."""

    def __init__(self, tokenizer, label: str) -> None:
        self.tokenizer, self.label = tokenizer, label
        self.history: list[tuple[int, float, float]] = []

    def __call__(self, step: int, model, seconds: float) -> None:
        success = held_out_success(getattr(model, "policy", model), self.tokenizer)  # PPO: the policy
        self.history.append((step, seconds, success))
        print(f"{self.label} step {step:4d}  held-out success {success:.3f}  {seconds:.0f}s", flush=True)


def eval_callback(tokenizer, minutes: float, every: int, label: str, decay: bool = False):
    """Held-out success every ``every`` steps (``.evaluate.history``), a stop once ``minutes`` of wall time have
    passed (the checks included) and, with ``decay``, a learning rate that follows a cosine from its initial value
    to zero over those minutes (a schedule over the wall-time budget, which a step count cannot give when the speed
    of the machine is not known in advance)."""
    from agentgym_r1.trainers.budget import WallClockBudget

    return WallClockBudget(
        minutes, cosine=decay, evaluate=HeldOut(tokenizer, label), every=every, evaluate_at_start=False
    )


def report(
    label: str,
    unit: str,
    before: float,
    history: list[tuple[int, float, float]],
    model,
    tokenizer,
    out: Path,
    final_eval: int,
) -> None:
    """The run's last line; with ``final_eval``, both checkpoints again on that many further held-out problems
    (``FINAL_FIRST`` on, never used to monitor the run, so no evaluation here picked what it reports)."""
    step, elapsed, after = history[-1]
    print(
        f"{label}: held-out success {before:.3f} -> {after:.3f} ({100 * (after - before):+.1f} points) "
        f"in {step} {unit}, {elapsed / 60:.1f} min wall"
    )
    final: dict[str, Any] = {}
    if final_eval:
        from transformers import AutoModelForCausalLM

        policy = getattr(model, "policy", model).eval()
        start = held_out_success(AutoModelForCausalLM.from_pretrained(out / "sft"), tokenizer, final_eval, FINAL_FIRST)
        end = held_out_success(policy, tokenizer, final_eval, FINAL_FIRST)
        print(
            f"{label}: on {final_eval} further held-out problems: {start:.3f} -> {end:.3f} "
            f"({100 * (end - start):+.1f} points)"
        )
        final = {"final": {"n": final_eval, "first": FINAL_FIRST, "before": start, "after": end}}
    save_result(
        out,
        label,
        unit=unit,
        steps=step,
        minutes=elapsed / 60,
        monitor_before=before,
        monitor_after=after,
        curve=[{"step": s, "seconds": t, "success": v} for s, t, v in history],
        **final,
    )


def run_grpo(
    out: Path,
    minutes: float,
    loss_mask: bool,
    every: int,
    lr: float,
    iterations: int = 1,
    batch: int = 64,
    temperature: float = 1.0,
    keep_ratio: float = 1.0,
    generations: int = 8,
    tag: str = "",
    decay: bool = False,
    final_eval: int = 0,
    per_generation: int = 1,
    step_value: float = 0.0,
    process_weight: float = 0.0,
    seed: int = 0,
) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft")
    label = (
        ("grpo" if loss_mask else "grpo-nomask")
        + f"-lr{lr:g}"
        + (f"-it{iterations}" if iterations > 1 else "")
        + (f"-spg{per_generation}" if per_generation > 1 else "")
        + (f"-b{batch}-t{temperature:g}" if (batch, temperature) != (64, 1.0) else "")
        + (f"-g{generations}" if generations != 8 else "")
        + (f"-k{keep_ratio:g}" if keep_ratio < 1 else "")
        + (f"-sv{step_value:g}" if step_value else "")
        + (f"-pw{process_weight:g}" if process_weight else "")
        + ("-cos" if decay else "")
        + (f"-seed{seed}" if seed else "")
        + tag
    )
    before = held_out_success(model, tokenizer)
    print(f"{label} step    0  held-out success {before:.3f}  0s", flush=True)
    args = AgentGRPOConfig(
        output_dir=str(out / label),
        env_id=ENV_ID,
        env_kwargs={**ENV_KWARGS, "step_value_reward": step_value},
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        num_generations=generations,
        process_reward_weight=process_weight,
        keep_ratio=keep_ratio,
        per_device_train_batch_size=batch // per_generation,
        steps_per_generation=per_generation,
        max_completion_length=160,
        learning_rate=lr,
        lr_scheduler_type="constant",
        beta=0.0,
        temperature=temperature,
        loss_mask=loss_mask,
        max_steps=100_000,
        logging_steps=5,
        report_to="tensorboard",
        gradient_checkpointing=False,
        save_strategy="steps",
        save_steps=50,
        save_total_limit=1,
        use_cpu=True,
        bf16=False,
        num_tasks=100_000,
        num_iterations=iterations,
        seed=seed,
        data_seed=seed,
    )
    callback = eval_callback(tokenizer, minutes, every, label, decay)
    trainer = AgentGRPOTrainer(model, args, tokenizer, callbacks=[callback])
    trainer.train()
    report(label, "steps", before, callback.evaluate.history, model, tokenizer, out, final_eval)


def run_ppo(
    out: Path, minutes: float, every: int, lr: float, decay: bool = False, final_eval: int = 0, tag: str = ""
) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.trainers.configs import AgentPPOConfig
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "sft")
    model = AutoModelForCausalLM.from_pretrained(out / "sft")
    label = f"ppo-lr{lr:g}" + ("-cos" if decay else "") + tag
    before = held_out_success(model, tokenizer)
    print(f"{label} step    0  held-out success {before:.3f}  0s", flush=True)
    args = AgentPPOConfig(
        output_dir=str(out / label),
        env_id=ENV_ID,
        env_kwargs=ENV_KWARGS,
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        rollout_batch_size=64,
        mini_batch_size=32,
        ppo_epochs=2,
        max_completion_length=160,
        learning_rate=lr,
        max_steps=100_000,
        logging_steps=5,
        report_to="tensorboard",
        use_cpu=True,
        seed=0,
    )
    callback = eval_callback(tokenizer, minutes, every, label, decay)
    trainer = AgentPPOTrainer(model, args, tokenizer, callbacks=[callback])
    trainer.train()
    report(label, "iterations", before, callback.evaluate.history, model, tokenizer, out, final_eval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["sft", "grpo", "ppo"])
    parser.add_argument("--out", type=Path, default=Path("runs/proof"))
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--num-iterations", type=int, default=1, help="GRPO updates per generated batch")
    parser.add_argument("--batch", type=int, default=64, help="GRPO episodes per generation (8 per prompt)")
    parser.add_argument(
        "--steps-per-generation",
        type=int,
        default=1,
        help="GRPO optimizer steps per generated batch (each on batch / this many episodes)",
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="GRPO sampling temperature")
    parser.add_argument("--generations", type=int, default=8, help="GRPO samples per prompt")
    parser.add_argument("--keep-ratio", type=float, default=1.0, help="StarPO-S: share of groups kept")
    parser.add_argument(
        "--step-value-reward",
        type=float,
        default=0.0,
        help="GRPO: process reward for a calculator result that matches the reference solution",
    )
    parser.add_argument(
        "--process-weight",
        type=float,
        default=0.0,
        help="GRPO: weight of each step's process reward on that step's tokens",
    )
    parser.add_argument("--seed", type=int, default=0, help="GRPO: the trainer's seed (task order, sampling)")
    parser.add_argument("--tag", default="", help="suffix of the run's output folder")
    parser.add_argument("--no-loss-mask", action="store_true")
    parser.add_argument("--cosine", action="store_true", help="decay the lr to 0 over --minutes (cosine in wall time)")
    parser.add_argument(
        "--final-eval",
        type=int,
        default=0,
        help="at the end, compare SFT and trained policy on this many further held-out problems",
    )
    parser.add_argument("--sft-target", type=float, default=0.15)
    parser.add_argument("--sft-chunk", type=int, default=25)
    parser.add_argument("--sft-max-steps", type=int, default=1500)
    parser.add_argument(
        "--sft-resume", type=int, default=0, help="continue the SFT checkpoint in --out, which had this many steps"
    )
    parser.add_argument("--sft-episodes", type=int, default=2000, help="expert episodes (training seeds 0..N-1)")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--protocol",
        type=Path,
        help="a confirmatory run: the committed protocol page (benchmarks/reports/); the run is "
        "refused before any work if the tree is dirty, the protocol is a draft or not committed, or "
        "its commit is not an ancestor of HEAD (benchmarks/study.py)",
    )
    a = parser.parse_args()
    PROVENANCE.update(study.start(__file__, a.out, a.protocol, a.seed if a.phase == "grpo" else None))
    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if a.phase == "sft":
        run_sft(
            a.out,
            a.sft_target,
            a.sft_chunk,
            a.sft_max_steps,
            a.sft_resume,
            a.sft_episodes,
            a.sft_lr,
            a.sft_batch,
            a.layers,
        )
    elif a.phase == "grpo":
        run_grpo(
            a.out,
            a.minutes,
            not a.no_loss_mask,
            a.eval_every,
            a.lr,
            a.num_iterations,
            a.batch,
            a.temperature,
            a.keep_ratio,
            a.generations,
            a.tag,
            a.cosine,
            a.final_eval,
            a.steps_per_generation,
            a.step_value_reward,
            a.process_weight,
            a.seed,
        )
    else:
        run_ppo(a.out, a.minutes, a.eval_every, a.lr, a.cosine, a.final_eval, a.tag)


if __name__ == "__main__":
    main()
