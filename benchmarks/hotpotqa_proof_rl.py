"""The HotpotQA proof's RL phases (``train_hotpotqa_proof.py grpo`` and ``ppo``): the RL task rows (question types,
the named comparisons' share), a run's learning curve on the monitoring questions, its budget (wall minutes or
updates), and its held-out result."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hotpotqa_proof_eval import react_em, save_react_result
from hotpotqa_proof_tasks import (
    BUDGET,
    ENV_ID,
    ENV_KWARGS,
    MAX_NEW_TOKENS,
    MAX_TURNS,
    PROVENANCE,
    TRAIN_SEEDS,
    held_out_sets,
    question_type,
    questions,
    scored_label,
    training_seeds,
    world,
)


class Curve:
    """A run's learning curve: held-out EM on the monitoring questions, written to ``path`` after each point. The
    ``evaluate`` of :class:`~agentgym_r1.trainers.budget.WallClockBudget` (which stops the run and sets the lr)."""

    def __init__(self, tokenizer: Any, monitor: list[int], label: str, path: Path) -> None:
        self.tokenizer, self.monitor, self.label, self.path = tokenizer, monitor, label, path
        self.history: list[dict[str, float]] = []

    def __call__(self, step: int, model: Any, seconds: float) -> None:
        em = react_em(getattr(model, "policy", model), self.tokenizer, self.monitor)  # PPO: the policy
        self.history.append({"step": step, "minutes": seconds / 60, "em": em})
        if world()[0]:
            return
        self.path.write_text(json.dumps({"run": self.label, "curve": self.history, "provenance": PROVENANCE}, indent=1))
        print(f"{self.label} step {step:4d}  held-out EM {em:.3f}  {seconds:.0f}s", flush=True)


def finish(
    out: Path, label: str, model: Any, tokenizer: Any, callback: Curve, finals: dict[str, list[int]], **extra: Any
) -> None:
    last = callback.history[-1]
    if not world()[0]:
        print(
            f"{label}: monitoring EM {callback.history[0]['em']:.3f} -> {last['em']:.3f} in {last['step']} steps, "
            f"{last['minutes']:.1f} min",
            flush=True,
        )
    policy = getattr(model, "policy", model)
    if not world()[0]:
        policy.save_pretrained(out / label / "final")  # for `eval --checkpoint OUT/<run>/final`
        tokenizer.save_pretrained(out / label / "final")
    for name, seeds in finals.items():
        save_react_result(
            out,
            scored_label(label, name),
            policy.eval(),
            tokenizer,
            seeds,
            steps=last["step"],
            minutes=last["minutes"],
            monitor=last["em"],
            processes=world()[1],
            held_out=name,
            **extra,
        )


RL_TYPES = {
    "all": ("bridge", "comparison", "comparison (yes/no)"),
    "bridge": ("bridge",),
    "names": ("bridge", "comparison"),
    "comparison": ("comparison",),
}


def share_indices(kinds: Sequence[str], share: float) -> list[int]:
    """Indices into rows of ``kinds`` (``bridge`` or ``comparison``) that make named comparisons ``share`` of them:
    every bridge row once, and the comparison rows cycled (repeated, or cut) to ``share / (1 - share)`` bridge rows.
    The trainer's sampler shuffles the rows, so a repeated comparison is drawn about as often as any other."""
    check_comparison_share("names", share)
    bridge = [i for i, k in enumerate(kinds) if k == "bridge"]
    named = [i for i, k in enumerate(kinds) if k == "comparison"]
    if not bridge or not named:
        raise ValueError(f"--comparison-share needs bridge and comparison rows, got {len(bridge)} and {len(named)}")
    count = round(share / (1 - share) * len(bridge))
    return bridge + [named[j % len(named)] for j in range(count)]


def check_comparison_share(types: str, share: float | None) -> None:
    """Refuse a ``--comparison-share`` that :func:`rl_tasks` cannot make: it mixes the ``names`` tasks, and a share is
    between 0 and 1."""
    if share is None:
        return
    if types != "names":
        raise ValueError(f"--comparison-share mixes the 'names' tasks; got --rl-types {types}: add --rl-types names")
    if not 0 < share < 1:
        raise ValueError(f"--comparison-share must be between 0 and 1 (exclusive), got {share}")


def rl_tasks(types: str, comparison_share: float | None = None, seeds: Sequence[int] | None = None) -> Any:
    """The RL task rows: the training seeds whose question type is in ``RL_TYPES[types]``: every one (``all``), the
    bridge questions (``bridge``: the one type whose answer a sampled episode can only get right by searching), the
    questions whose answer is a name (``names``: bridge and named comparisons, no yes/no question, whose sampled
    answer is right half the time by chance) or the named comparisons alone (``comparison``). With ``names``,
    ``comparison_share`` sets the named comparisons' share of the rows (their natural share is 37%). ``seeds``: the
    training reset seeds (default 0..TRAIN_SEEDS-1; :func:`training_seeds` under the held-out partition)."""
    from agentgym_r1.trainers.common import task_dataset

    check_comparison_share(types, comparison_share)
    seeds = list(range(TRAIN_SEEDS)) if seeds is None else list(seeds)
    rows = task_dataset(max(seeds) + 1)  # the trainers' own task rows: row i plays reset seed i
    if seeds != list(range(len(rows))):
        rows = rows.select(seeds)
    if types != "all":
        kinds = [question_type(t) for t in questions(seeds)]
        keep = [i for i, kind in enumerate(kinds) if kind in RL_TYPES[types]]
        if comparison_share is not None:
            keep = [keep[i] for i in share_indices([kinds[i] for i in keep], comparison_share)]
        rows = rows.select(keep)
    named = "" if comparison_share is None else f", named comparisons {100 * comparison_share:.0f}% of them"
    print(f"RL tasks: {len(rows)} training rows ({types}{named})", flush=True)
    return rows


def train(
    out: Path,
    start: Path,
    label: str,
    trainer_class: Any,
    args: Any,
    minutes: float,
    every: int,
    types: str = "all",
    budget: str = "wall",
    schedule: str = "cosine",
    comparison_share: float | None = None,
    steps: int | None = None,
    **extra: Any,
) -> None:
    """Train the checkpoint ``start`` with ``trainer_class(model, args, tokenizer)`` on the training questions of
    ``types`` for ``minutes`` (its learning curve in ``OUT/<label>/curve.json``), then save the policy and its held-out
    result. ``budget="wall"``: the minutes are wall time, monitoring included; ``"train"``: training time alone.
    With ``steps``, the run makes exactly that many updates instead (the lr on ``schedule`` over the updates), so the
    load on the machine cannot change what it trains: a confirmatory run's budget."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.trainers.budget import EveryUpdates, WallClockBudget

    tokenizer = PreTrainedTokenizerFast.from_pretrained(start)
    model = AutoModelForCausalLM.from_pretrained(start)
    (out / label).mkdir(parents=True, exist_ok=True)
    monitor, finals = held_out_sets(out)
    curve = Curve(tokenizer, monitor, label, out / label / "curve.json")
    if steps:  # the caller's args hold max_steps=steps and the schedule
        budget, callback = "updates", EveryUpdates(curve, every, steps)
    else:
        callback = WallClockBudget(
            minutes, cosine=schedule == "cosine", evaluate=curve, every=every, count_evaluation=budget == "wall"
        )
    rows = rl_tasks(types, comparison_share, training_seeds(out))
    trainer_class(model, args, tokenizer, train_dataset=rows, callbacks=[callback]).train()
    finish(
        out,
        label,
        model,
        tokenizer,
        curve,
        finals,
        start=str(start),
        types=types,
        budget=budget,
        schedule=schedule,
        comparison_share=comparison_share,
        **extra,
    )


def rl_env_kwargs(reward: str) -> dict[str, Any]:
    """The RL env: the held-out env with the outcome reward ``reward`` (``em``; ``char_f1``: partial credit for a name
    a few characters off). Held-out EM is always measured with ``em``."""
    return {**ENV_KWARGS, "reward_metric": reward}


def run_label(base: str, seed: int, reward: str) -> str:
    return f"{base}{'' if reward == 'em' else '-' + reward.replace('_', '')}-seed{seed}"


def run_grpo(
    out: Path,
    start: Path,
    minutes: float,
    every: int,
    lr: float,
    layout: str,
    estimator: str,
    seed: int,
    batch: int,
    generations: int,
    threads: int,
    temperature: float,
    types: str,
    reward: str = "em",
    budget: str = "wall",
    iterations: int = 1,
    schedule: str = "cosine",
    comparison_share: float | None = None,
    steps: int | None = None,
) -> None:
    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    name = {"grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforcepp"}[estimator]
    label = run_label(
        f"{name}-{layout}"
        + ("" if iterations == 1 else f"-it{iterations}")
        + ("" if schedule == "cosine" else f"-{schedule}")
        + ("" if comparison_share is None else f"-cmp{round(100 * comparison_share)}"),
        seed,
        reward,
    )
    args = AgentGRPOConfig(
        output_dir=str(out / label),
        env_id=ENV_ID,
        env_kwargs=rl_env_kwargs(reward),
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        num_generations=generations,
        per_device_train_batch_size=batch,
        max_completion_length=BUDGET["completion"],
        layout=layout,
        advantage_estimator=estimator,
        learning_rate=lr,
        lr_scheduler_type="cosine" if steps and schedule == "cosine" else "constant",  # else WallClockBudget's
        beta=0.0,
        temperature=temperature,
        max_steps=steps or 100_000,
        logging_steps=5,
        report_to="tensorboard",
        gradient_checkpointing=False,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        num_tasks=TRAIN_SEEDS,
        seed=seed,
        data_seed=seed,
        num_iterations=iterations,
    )
    train(
        out,
        start,
        label,
        AgentGRPOTrainer,
        args,
        minutes,
        every,
        types,
        budget,
        schedule,
        comparison_share,
        steps,
        threads=threads,
        lr=lr,
        batch=batch,
        temperature=temperature,
        reward=reward,
        iterations=iterations,
    )


def run_ppo(
    out: Path,
    start: Path,
    minutes: float,
    every: int,
    lr: float,
    advantage_mask: bool,
    loss_mask: bool,
    seed: int,
    batch: int,
    threads: int,
    temperature: float,
    types: str,
    reward: str = "em",
    budget: str = "wall",
    steps: int | None = None,
) -> None:
    from agentgym_r1.trainers.configs import AgentPPOConfig
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    label = run_label("ppo" + ("" if advantage_mask else "-noadv") + ("" if loss_mask else "-noloss"), seed, reward)
    args = AgentPPOConfig(
        output_dir=str(out / label),
        env_id=ENV_ID,
        env_kwargs=rl_env_kwargs(reward),
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        rollout_batch_size=batch,
        mini_batch_size=batch // 2,
        ppo_epochs=2,
        max_completion_length=BUDGET["completion"],
        learning_rate=lr,
        lr_scheduler_type="cosine" if steps else "constant",  # a wall-clock run: WallClockBudget's cosine
        max_steps=steps or 100_000,
        logging_steps=5,
        report_to="tensorboard",
        save_strategy="no",
        use_cpu=True,
        seed=seed,
        temperature=temperature,
        num_tasks=TRAIN_SEEDS,
        advantage_mask=advantage_mask,
        loss_mask=loss_mask,
    )
    train(
        out,
        start,
        label,
        AgentPPOTrainer,
        args,
        minutes,
        every,
        types,
        budget,
        steps=steps,
        threads=threads,
        lr=lr,
        batch=batch,
        temperature=temperature,
        reward=reward,
    )
