"""The quick suite's trained agent: the mission on the board, not only scripted baselines.

A tokenizer and a tiny Qwen2 model are built on the spot (:mod:`agentgym_r1.adapters.scratch`), fine-tuned on expert
episodes of GSM8K's synthetic source played through the rollout engine (:func:`agentgym_r1.trainers.sft.expert_rows`)
and TRL's ``SFTTrainer`` (:func:`agentgym_r1.trainers.sft.sft`), then trained with
:class:`~agentgym_r1.trainers.grpo.AgentGRPOTrainer` for a fixed number of steps (a step budget, not wall time, so a
run is reproducible; seeds fixed). Its two rows, *before training* (the SFT checkpoint) and *after training* (the
GRPO policy), are evaluation jobs like any other (``hf:CHECKPOINT``: greedy, on the rollout engine, the same
held-out episodes as the baselines beside them, stored as they finish). The held-out learning curve is read every
``eval_every`` GRPO steps through the same player (:meth:`~agentgym_r1.leaderboard.batched.EnginePlayer.from_model`,
the same episodes and batches), so its first and last points are the two rows.

The recipe is the proof of learning's (``benchmarks/train_gsm8k_proof.py``, "Training" in ``benchmarks/README.md``):
one calculator step per problem and a one-line system prompt; training tasks from the generator seeded 0, held-out
episodes from the generator seeded 3 (:data:`HELD_OUT_OPTIONS`), which training never sees.

What happens is recorded in the results store (:class:`~agentgym_r1.leaderboard.store.TrainingRecord`) as it goes:
``running`` when it starts, each curve point as it is read, then ``done``, ``failed`` (an exception, with its
message) or ``interrupted`` (Ctrl-C); ``skipped`` without the ``train`` extra. A process killed outright leaves
``running``, which the board reads as interrupted once the process is gone. The board then shows the rows that finished
and says which training row is missing and why. The checkpoints go to ``out_dir`` (``sft/``, ``grpo/``); a rerun keeps a
finished SFT checkpoint and trains again what did not finish.

``callbacks`` (transformers ``TrainerCallback`` objects) are given to the GRPO trainer: a hook to watch or stop
training (the tests inject a failure through one).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentgym_r1.error import DependencyNotInstalled, require
from agentgym_r1.leaderboard.jobs import Job, canonical, job_meta, run_jobs
from agentgym_r1.leaderboard.store import ResultsStore, TrainingRecord
from agentgym_r1.leaderboard.suites import TRAINED_ENTRY, TRAINED_HELD_OUT_OPTIONS, TRAINED_TASK_OPTIONS
from agentgym_r1.leaderboard.suites import env_kwargs as full_env_kwargs

ENV_ID, SOURCE = TRAINED_ENTRY.env_id, TRAINED_ENTRY.source
TASK_OPTIONS: dict[str, Any] = TRAINED_TASK_OPTIONS
HELD_OUT_OPTIONS: dict[str, Any] = TRAINED_HELD_OUT_OPTIONS  # the generator seeded 3: never trained on
# What the trained rows' figures depend on, printed under them (benchmarks/reports/main_job.md has the runs).
DEPENDS = (
    "Both trained rows depend on the training seed and on the CPU's floating-point kernels (the SFT parts "
    "between kernel settings after about 40 of its 850 steps): over 10 pre-registered runs (seeds 0-4, two kernel "
    "settings) the before row ranged 18.3-52.8% and the gain +1.3 to +9.4 points (p < 0.01 paired in 8 of 10, "
    "intervals apart in 4); the paired test above is this run's. The gain is not RL's: in a registered study on "
    "1,024 fresh problems, 60 SFT updates at GRPO's learning rate from the same start beat these 60 GRPO updates "
    "from all 5 starts, by 4.3 points pooled [2.3, 6.3], in an eighth of the time (benchmarks/reports/main_job.md)."
)
COMPLETE = ".complete"  # written in a checkpoint folder once it is saved whole


GRPO_SCHEDULES = ("constant", "cosine", "linear")  # transformers' lr schedulers the GRPO phase may use


@dataclass(frozen=True)
class TrainBudget:
    """How much training the run does: fixed step counts (reproducible), the model's size and the recipe."""

    sft_steps: int = 850
    grpo_steps: int = 60
    eval_every: int = 20
    sft_episodes: int = 4000
    sft_batch: int = 16
    sft_lr: float = 3e-3
    sft_schedule: str = "constant_with_warmup"
    grpo_prompts: int = 16
    generations: int = 8
    grpo_lr: float = 6e-4
    grpo_schedule: str = "constant"
    layers: int = 4
    hidden: int = 128
    vocab: int = 1000
    tokenizer_episodes: int = 300
    max_new_tokens: int = 40
    max_turns: int = 3
    max_completion_length: int = 160
    seed: int = 0

    def __post_init__(self) -> None:
        from agentgym_r1.error import ConfigError

        for name in ("sft_steps", "grpo_steps", "eval_every", "sft_episodes", "sft_batch", "grpo_prompts", "layers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"the training budget's {name} must be at least 1, got {getattr(self, name)}")
        from agentgym_r1.trainers.sft import SCHEDULES

        if self.sft_schedule not in SCHEDULES:
            raise ConfigError(
                f"the training budget's sft_schedule must be one of {SCHEDULES}, got {self.sft_schedule!r}"
            )
        if self.grpo_schedule not in GRPO_SCHEDULES:
            raise ConfigError(
                f"the training budget's grpo_schedule must be one of {GRPO_SCHEDULES}, got {self.grpo_schedule!r}"
            )
        if self.generations < 2:
            raise ConfigError(
                f"the training budget's generations must be at least 2 (GRPO compares samples of one "
                f"task), got {self.generations}"
            )


@dataclass(frozen=True)
class TrainPlan:
    """Where the trained agent's results and checkpoints go, and how its rows are evaluated (as the board's jobs)."""

    results: str
    out_dir: Path
    episodes: int = TRAINED_ENTRY.episodes
    seed: int = 0
    suite: str = "quick"
    # Episodes per engine batch when the rows are scored: 64 plays 512 held-out problems in 7.0-7.7 s, against
    # 9.4-10.1 s at the board's default of 16, with the same greedy outcome on every one (the main job's SFT
    # checkpoint, 2026-11-27; benchmarks/main_job_batch.py, benchmarks/reports/main_job.md).
    concurrency: int = 64
    timeout: float = 60.0
    budget: TrainBudget = TrainBudget()
    curve_episodes: int = 128  # the learning curve is read on the first ones of the rows' episodes (cheap)
    held_out_seed: int = HELD_OUT_OPTIONS["seed"]  # the generator of the rows' problems; studies choose on another

    @property
    def held_out(self) -> dict[str, Any]:
        return {**HELD_OUT_OPTIONS, "seed": self.held_out_seed}

    def __post_init__(self) -> None:
        from agentgym_r1.error import ConfigError

        for name in ("episodes", "curve_episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"the trained agent's {name} must be at least 1, got {getattr(self, name)}")
        if self.held_out_seed == TASK_OPTIONS.get("seed", 0):
            raise ConfigError(
                f"held_out_seed={self.held_out_seed} is the generator the agent trains on; give another seed"
            )

    @property
    def key(self) -> str:
        return json.dumps(
            [ENV_ID, SOURCE, self.held_out, self.episodes, self.seed, asdict(self.budget)],
            sort_keys=True,
            separators=(",", ":"),
        )

    def spec(self, stage: str) -> str:
        return f"hf:{self.out_dir / stage}?max_new_tokens={self.budget.max_new_tokens}"

    def job(self, stage: str) -> Job:
        return Job(
            ENV_ID,
            SOURCE,
            self.spec(stage),
            self.seed,
            self.episodes,
            self.suite,
            self.timeout,
            1,
            self.concurrency,
            env_kwargs=canonical(self.held_out),
        )

    def curve_items(self) -> list[tuple[int, int]]:
        """The episodes the learning curve reads: the first ``curve_episodes`` of the rows' (the same tasks)."""
        return self.job("grpo").items()[: self.curve_episodes]


def train_on_board(
    plan: TrainPlan,
    callbacks: Sequence[Any] = (),
    say: Callable[[str], None] = lambda _: None,
    progress: Callable[..., None] | None = None,
) -> TrainingRecord:
    """Train the tiny agent and evaluate its two rows into ``plan.results``; returns the record. An exception in
    training is recorded (``failed``) and returned, not raised; Ctrl-C is recorded (``interrupted``) and re-raised."""
    store = ResultsStore(plan.results)
    try:
        try:  # the README's main job installs the train extra; without it the board says so, and goes on
            for module in ("torch", "transformers", "trl"):
                require(module, "train", "the quick suite's trained agent")
        except DependencyNotInstalled as e:
            rec = TrainingRecord(
                plan.key,
                ENV_ID,
                SOURCE,
                canonical(plan.held_out),
                "skipped",
                str(e),
                plan.spec("sft"),
                plan.spec("grpo"),
                plan.budget.grpo_steps,
                [],
                asdict(plan.budget),
            )
            store.save_training(rec)
            return rec
        old = next((r for r in store.trainings() if r.key == plan.key), None)
        if old is not None and old.status == "done" and _complete(plan.out_dir / "grpo"):
            say(f"tiny agent: trained already ({plan.out_dir / 'grpo'}); its rows resume")
            for stage in ("sft", "grpo"):
                run_jobs([plan.job(stage)], plan.results, workers=1, progress=progress)
            return old
        rec = TrainingRecord(
            plan.key,
            ENV_ID,
            SOURCE,
            canonical(plan.held_out),
            "running",
            "setup",
            plan.spec("sft"),
            plan.spec("grpo"),
            plan.budget.grpo_steps,
            [],
            asdict(plan.budget),
            str(plan.out_dir / "grpo"),
            os.getpid(),
        )
        store.save_training(rec)
        try:
            _train(plan, rec, store, callbacks, say, progress)
        except KeyboardInterrupt:
            _stop(store, rec, "interrupted", f"training interrupted (Ctrl-C) during {rec.message}")
            raise
        except Exception as e:  # a failure of the training is its row's, not the board's
            _stop(store, rec, "failed", f"training failed during {rec.message}: {type(e).__name__}: {e}")
        return rec
    finally:
        store.close()


def _stop(store: ResultsStore, rec: TrainingRecord, status: str, message: str) -> None:
    rec.status, rec.message = status, message
    store.save_training(rec)


def _complete(path: Path) -> bool:
    return (path / COMPLETE).exists()


def _save(model: Any, tokenizer: Any, path: Path) -> None:
    (path / COMPLETE).unlink(missing_ok=True)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    (path / COMPLETE).write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n", encoding="utf-8")


def _train(
    plan: TrainPlan,
    rec: TrainingRecord,
    store: ResultsStore,
    callbacks: Sequence[Any],
    say: Callable[[str], None],
    progress: Callable[..., None] | None,
) -> None:
    budget, out = plan.budget, plan.out_dir

    def mark(stage: str) -> None:  # where training is, stored: a killed process leaves it for the board
        rec.message = stage
        store.save_training(rec)

    start = time.monotonic()
    if _complete(out / "sft"):
        say(f"tiny agent: SFT checkpoint kept from an earlier run ({out / 'sft'})")
    else:
        mark(f"SFT (0/{budget.sft_steps} steps)")
        _sft(budget, out / "sft", mark)
        say(f"tiny agent: SFT {budget.sft_steps} steps in {time.monotonic() - start:.0f} s -> {out / 'sft'}")
    mark("the evaluation of the SFT checkpoint")
    rec.curve = [_row_point(plan, "sft", 0, progress)]
    mark(f"GRPO (0/{budget.grpo_steps} steps)")
    start = time.monotonic()
    model, tokenizer = _grpo(plan, rec, store, mark, callbacks, say)
    say(f"tiny agent: GRPO {budget.grpo_steps} steps in {time.monotonic() - start:.0f} s -> {out / 'grpo'}")
    _save(model, tokenizer, out / "grpo")
    mark("the evaluation of the trained policy")
    rec.curve.append(_row_point(plan, "grpo", budget.grpo_steps, progress))
    rec.status, rec.message = "done", None
    store.save_training(rec)


def _row_point(plan: TrainPlan, stage: str, step: int, progress: Callable[..., None] | None) -> list[float]:
    """Evaluate one of the two rows as a board job (resumable), and return it as a curve point
    ``[step, success, episodes]`` on the curve's episodes (:meth:`TrainPlan.curve_items`)."""
    job = plan.job(stage)
    (outcome,) = run_jobs([job], plan.results, workers=1, progress=progress)
    store = ResultsStore(plan.results)
    try:
        (run,) = [r for r in store.runs() if r["key"] == job_meta(job).key]
        episodes = store.episodes(run["id"])
    finally:
        store.close()
    if outcome.status != "done" or not episodes:
        raise RuntimeError(f"the evaluation of {plan.spec(stage)} ended {outcome.status}: {outcome.message}")
    first = {idx for idx, _ in plan.curve_items()}
    episodes = [e for e in episodes if e.idx in first]  # the curve's episodes, read from the row's
    return [step, sum(e.success for e in episodes) / len(episodes), len(episodes)]


def sft_start(budget: TrainBudget) -> tuple[Any, Any, list[Any]]:
    """What the SFT starts from: a tokenizer trained on ``tokenizer_episodes`` expert transcripts, the untrained tiny
    model (its weights seeded by ``budget.seed``) and the rows of ``sft_episodes`` expert episodes, played through
    the rollout engine (:func:`agentgym_r1.trainers.sft.expert_rows`)."""
    import gymnasium as gym

    from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer
    from agentgym_r1.envs.gsm8k.expert import expert_actions

    env = gym.make(ENV_ID, source=SOURCE, **TASK_OPTIONS)
    try:
        texts = []
        for seed in range(budget.tokenizer_episodes):
            play_expert(env, seed, expert_actions)
            texts.append(render_chat(env.unwrapped.transcript.messages()))
    finally:
        env.close()
    tokenizer = train_tokenizer(texts, vocab_size=budget.vocab, split_digits=True, cross_spaces=True)
    model = make_model(tokenizer, hidden=budget.hidden, layers=budget.layers, mlp_ratio=4, seed=budget.seed).train()
    return tokenizer, model, sft_rows(budget, tokenizer)


def sft_rows(budget: TrainBudget, tokenizer: Any) -> list[Any]:
    """The SFT's rows: ``sft_episodes`` expert episodes of the training generator played through the rollout engine in
    ``tokenizer`` (:func:`agentgym_r1.trainers.sft.expert_rows`); a saved checkpoint's tokenizer gives its rows."""
    from agentgym_r1.envs.gsm8k.expert import expert_actions
    from agentgym_r1.trainers.sft import expert_rows

    kwargs = {"source": SOURCE, **TASK_OPTIONS}
    return expert_rows(ENV_ID, kwargs, range(budget.sft_episodes), tokenizer, expert_actions).samples


def train_sft(
    budget: TrainBudget, tokenizer: Any, model: Any, rows: Sequence[Any], on_step: Callable[[int, float], None] | None
) -> None:
    """The main job's SFT of :func:`sft_start`'s model on its rows: the budget's steps, batch, learning rate, schedule
    and seed (:func:`agentgym_r1.trainers.sft.sft`); ``on_step(step, loss)`` is called after each step."""
    from agentgym_r1.trainers.sft import sft

    sft(
        model,
        tokenizer,
        rows,
        steps=budget.sft_steps,
        batch_size=budget.sft_batch,
        lr=budget.sft_lr,
        schedule=budget.sft_schedule,
        seed=budget.seed,
        on_step=on_step,
    )


def _sft(budget: TrainBudget, path: Path, mark: Callable[[str], None]) -> None:
    tokenizer, model, rows = sft_start(budget)

    def on_step(step: int, _loss: float) -> None:
        if step % 50 == 0:
            mark(f"SFT ({step}/{budget.sft_steps} steps)")

    train_sft(budget, tokenizer, model, rows, on_step)
    _save(model, tokenizer, path)


def grpo_config(plan: TrainPlan, **overrides: Any) -> Any:
    """The GRPO run's ``AgentGRPOConfig``: the budget's recipe on CPU in fp32, a step budget, no checkpoints saved;
    ``overrides`` are config fields over the recipe's (development runs: ``benchmarks/main_job_grpo_dev.py``), checked
    as any config's."""
    import dataclasses

    from agentgym_r1.trainers.configs import AgentGRPOConfig

    # Activation checkpointing off, under the name the installed transformers reads: TRL 1.16's _BaseConfig always
    # sets gradient_checkpointing (default True), which transformers 5.24 renamed activation_checkpointing; it warns
    # whenever the old name is set and the new one is not (training_args.py:1536-1541, TrainingArguments.__post_init__).
    # Older transformers have no activation_checkpointing field.
    budget, names = plan.budget, {f.name for f in dataclasses.fields(AgentGRPOConfig)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    fields = (
        dict(
            output_dir=str(plan.out_dir / "grpo-trainer"),
            env_id=ENV_ID,
            env_kwargs={"source": SOURCE, **TASK_OPTIONS},
            max_turns=budget.max_turns,
            max_new_tokens=budget.max_new_tokens,
            num_generations=budget.generations,
            per_device_train_batch_size=budget.grpo_prompts * budget.generations,
            max_completion_length=budget.max_completion_length,
            learning_rate=budget.grpo_lr,
            lr_scheduler_type=budget.grpo_schedule,  # transformers' SchedulerType names
            beta=0.0,
            temperature=1.0,
            max_steps=budget.grpo_steps,
            logging_steps=budget.eval_every,
            report_to="none",
            **{checkpointing: False},
            save_strategy="no",
            use_cpu=True,
            bf16=False,
            num_tasks=max(1024, budget.grpo_steps * budget.grpo_prompts),
            seed=budget.seed,
            data_seed=budget.seed,
            disable_tqdm=True,
        )
        | overrides
    )
    return AgentGRPOConfig(**fields)


def _grpo(
    plan: TrainPlan,
    rec: TrainingRecord,
    store: ResultsStore,
    mark: Callable[[str], None],
    callbacks: Sequence[Any],
    say: Callable[[str], None],
) -> tuple[Any, Any]:
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.leaderboard.batched import EnginePlayer
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer
    from agentgym_r1.trainers.trl_surface import trl_deprecations_silenced

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    budget, sft_dir = plan.budget, plan.out_dir / "sft"
    tokenizer = load_tokenizer(str(sft_dir), "the SFT checkpoint")
    model = load_model(str(sft_dir), "the SFT checkpoint", device="cpu").train()  # from_pretrained, as before
    args = grpo_config(plan)
    job = plan.job("grpo")
    held_out = full_env_kwargs(ENV_ID, SOURCE, plan.held_out)

    class Curve(TrainerCallback):
        """Where training is, and the held-out success every ``eval_every`` steps (the last step's point is the
        after-training row, evaluated from the saved checkpoint)."""

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = state.global_step
            mark(f"GRPO ({step}/{budget.grpo_steps} steps)")
            if step % budget.eval_every or step >= budget.grpo_steps:
                return control
            player = EnginePlayer.from_model(model, tokenizer, budget.max_new_tokens, plan.timeout)
            try:
                records = list(player.play(ENV_ID, held_out, plan.curve_items(), job.concurrency))
            finally:
                player.close()
            success = sum(r.success for r in records) / len(records)
            rec.curve.append([step, success, len(records)])
            store.save_training(rec)
            say(f"tiny agent: GRPO step {step}/{budget.grpo_steps}: held-out success {success:.3f}")
            return control

    trainer = AgentGRPOTrainer(model, args, tokenizer, callbacks=[Curve(), *callbacks])
    for printer in (PrinterCallback, ProgressCallback):  # our own lines instead of the log dicts
        trainer.remove_callback(printer)
    try:
        with trl_deprecations_silenced():
            trainer.train()
    finally:
        trainer.rollouts.close()
    return model, tokenizer
