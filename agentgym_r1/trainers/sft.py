"""Supervised warm start on expert episodes, through the same path as RL: the expert's actions are played by the
rollout engine (a :class:`~agentgym_r1.adapters.backends.scripted.ScriptedBackend` emits them), which makes ordinary
:class:`~agentgym_r1.adapters.records.Sample` rows with their env masks, and TRL's ``SFTTrainer`` trains on them with
the loss on agent tokens only (the env mask becomes its ``assistant_masks`` column).

Which actions are the expert's is the caller's: an env's own expert (GSM8K's
:func:`agentgym_r1.envs.gsm8k.expert.expert_actions`), a scripted baseline through :func:`policy_actions`, or any
callable from a task to its actions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.scripted import ScriptedBackend
from agentgym_r1.adapters.records import Layout, RolloutBatch, Sample
from agentgym_r1.error import ConfigError

Actions = Callable[[Any], Sequence[str]]
SCHEDULES = ("constant_with_warmup", "linear", "cosine")
SAMPLINGS = ("replacement", "epochs")


def policy_actions(env: gym.Env, policy: Any, max_turns: int) -> Actions:
    """An ``actions`` callable for :func:`expert_rows` from a deterministic :class:`~agentgym_r1.leaderboard.
    policies.Policy` (a scripted baseline such as WebShop's rule shopper): it plays ``policy`` on the task (found by
    its id) in ``env``, an env of its own, for at most ``max_turns`` steps, and returns the actions it took."""
    if max_turns < 1:
        raise ConfigError(f"policy_actions needs max_turns >= 1, got {max_turns}")

    def actions(task: Any) -> list[str]:
        taken: list[str] = []
        obs, info = env.reset(options={"task_id": task.id})
        policy.reset(env, obs, info)
        for _ in range(max_turns):
            taken.append(policy.act(obs, info))
            obs, _, terminated, truncated, info = env.step(taken[-1])
            if terminated or truncated:
                break
        return taken

    return actions


def expert_scripts(
    env_id: str,
    env_kwargs: dict[str, Any],
    seeds: Sequence[int],
    chat: ChatTokenizer,
    actions: Actions,
    options: Sequence[dict[str, Any] | None] | None = None,
) -> dict[tuple[int, ...], list[list[int]]]:
    """Each seed's first prompt (as the engine renders it) and the ids of the expert's turns, each closed by the
    tokenizer's end-of-turn token; ``options`` (one per seed) are the resets' options (e.g. ``{"index": i}``)."""
    end = chat.tokenizer.eos_token_id
    if end not in chat.stop_token_ids:
        end = min(chat.stop_token_ids)
    env = gym.make(env_id, **env_kwargs)
    try:
        scripts = {}
        for seed, option in zip(seeds, options or [None] * len(seeds), strict=True):
            env.reset(seed=seed, options=option)
            prompt = tuple(chat.prompt_ids(env.unwrapped.transcript.messages()))
            scripts[prompt] = [[*chat.encode(a), end] for a in actions(env.unwrapped.task)]
    finally:
        env.close()
    return scripts


def expert_rows(
    env_id: str,
    env_kwargs: dict[str, Any],
    seeds: Sequence[int],
    tokenizer: Any,
    actions: Actions,
    *,
    layout: Layout = "concatenated",
    max_context_tokens: int = 1 << 16,
    require_success: bool = True,
    chunk: int = 256,
    options: Sequence[dict[str, Any] | None] | None = None,
) -> RolloutBatch:
    """Play the expert on ``env_id`` (made with ``env_kwargs``), one episode per reset seed, through the rollout
    engine, and return the batch: its rows (``batch.rows``) are what RL would make of the same tokens.

    An episode the engine could not play (an env error, a context over ``max_context_tokens``) raises, and so does
    an unsuccessful one when ``require_success`` (an expert that fails its task teaches the wrong thing). The
    episodes are played ``chunk`` at a time, so the engine's pooled envs are reused rather than one made per seed.
    ``options``, one per seed, are the resets' options: a task picked by ``{"index": i}`` or ``{"task_id": ...}``
    rather than drawn from the seed (ALFWorld's generated games are numbered, not drawn)."""
    seeds = list(seeds)
    if not seeds:
        raise ConfigError("expert_rows needs at least one seed")
    if chunk < 1:
        raise ConfigError(f"expert_rows needs chunk >= 1, got {chunk}")
    resets = list(options) if options is not None else [None] * len(seeds)
    if len(resets) != len(seeds):
        raise ConfigError(f"expert_rows needs one options entry per seed: {len(seeds)} seeds, {len(resets)} options")
    chat = ChatTokenizer(tokenizer)
    backend = ScriptedBackend(expert_scripts(env_id, env_kwargs, seeds, chat, actions, resets))
    config = RolloutConfig(
        max_context_tokens=max_context_tokens,
        layout=layout,
        sampling=SamplingParams(max_new_tokens=max_context_tokens, temperature=0.0),
        seed=None,
    )
    engine = RolloutEngine(backend, chat, config)
    episodes = []
    try:
        for i in range(0, len(seeds), chunk):
            prompts = [
                Prompt(env_id, dict(env_kwargs), seed=s, options=o)
                for s, o in zip(seeds[i : i + chunk], resets[i : i + chunk], strict=True)
            ]
            episodes += engine.rollout(prompts).episodes
    finally:
        engine.close()
    for seed, option, ep in zip(seeds, resets, episodes, strict=True):
        where = f"seed {seed}" + (f" (options {option})" if option else "")
        if ep.failed or ep.end_reason == "context_limit":
            raise ConfigError(f"the expert's episode of {where} on {env_id} ended {ep.end_reason}: {ep.error}")
        if require_success and not ep.success:
            raise ConfigError(f"the expert failed its task on {where} of {env_id} (pass require_success=False)")
    return RolloutBatch(episodes, layout)


def answer_row(prompt_ids: Sequence[int], answer_ids: Sequence[int], row_id: str = "answer") -> Sample:
    """A one-turn supervised row with no env: ``answer_ids`` (end-of-turn token included) after ``prompt_ids``, all
    of it trained on (a retrieval-augmented baseline's question and answer)."""
    n = len(answer_ids)
    if n < 1:
        raise ConfigError("answer_row needs at least one answer token")
    return Sample(list(prompt_ids), list(answer_ids), [0.0] * n, [1] * n, [n - 1], [1.0], 1.0, {}, True, row_id, 0)


def sft_dataset(rows: Sequence[Sample]) -> Any:
    """Rows as a tokenized ``datasets.Dataset`` for ``SFTTrainer``: ``input_ids`` (prompt and completion) and
    ``assistant_masks`` (1 on agent tokens: TRL builds ``labels`` from it, -100 elsewhere)."""
    from datasets import Dataset

    if not rows:
        raise ConfigError("sft_dataset needs at least one row")
    return Dataset.from_dict(
        {
            "input_ids": [r.prompt_ids + r.completion_ids for r in rows],
            "assistant_masks": [[0] * len(r.prompt_ids) + list(r.env_mask) for r in rows],
        }
    )


def draws(rows: int, steps: int, batch_size: int, seed: int) -> list[int]:
    """The row indices of ``steps`` batches of ``batch_size``, each batch drawn uniformly with replacement by a
    ``torch.Generator`` seeded with ``seed``, one ``randint`` call a step (the draw of the hand-written loop that
    SFT through TRL replaced, so a seed gives the batches it gave)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [i for _ in range(steps) for i in torch.randint(rows, (batch_size,), generator=gen).tolist()]


def sft(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Sample],
    *,
    steps: int,
    batch_size: int = 16,
    lr: float = 3e-3,
    schedule: str = "constant_with_warmup",
    warmup_steps: int = 10,
    sampling: str = "replacement",
    seed: int = 0,
    output_dir: str | Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Fine-tune ``model`` on ``rows`` for ``steps`` optimizer steps with TRL's ``SFTTrainer`` (AdamW, no weight
    decay, gradients clipped at 1, ``warmup_steps`` of linear warm-up from ``1 / warmup_steps`` of ``lr`` on the first
    step, then ``schedule``); returns each step's loss. Batches are drawn with replacement (:func:`draws`), or with
    ``sampling="epochs"`` as shuffled passes over the rows. ``on_step(step, loss)`` is called after each step
    (1-based). Nothing is saved (the caller saves the model).

    The steps are the hand-written loop's, bit for bit (:func:`sft_trainer_class`). transformers' warm-up gives the
    first step lr 0, a step lost in every call: a run of 50-step calls (the proofs' chunks) lost 18 of 900, its
    held-out NLL trailed the old loop's at every chunk, and the HotpotQA proof's start scored 6.8% against 23.8%.
    """
    import tempfile

    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig

    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if value < 1:
            raise ConfigError(f"sft needs {name} >= 1, got {value}")
    if not lr > 0:
        raise ConfigError(f"sft needs lr > 0, got {lr}")
    if schedule not in SCHEDULES:
        raise ConfigError(f"sft's schedule must be one of {SCHEDULES}, got {schedule!r}")
    if sampling not in SAMPLINGS:
        raise ConfigError(f"sft's sampling must be one of {SAMPLINGS}, got {sampling!r}")
    if not rows:
        raise ConfigError("sft needs at least one row")
    if sampling == "replacement":  # the dataset is the draw, read in order
        rows = [rows[i] for i in draws(len(rows), steps, batch_size, seed)]
    losses: list[float] = []

    class Losses(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                if on_step is not None:
                    on_step(state.global_step, losses[-1])

    with tempfile.TemporaryDirectory() as scratch:
        args = SFTConfig(
            output_dir=str(output_dir or scratch),
            max_steps=steps,
            per_device_train_batch_size=batch_size,
            learning_rate=lr,
            lr_scheduler_type=schedule,
            warmup_steps=warmup_steps,
            weight_decay=0.0,
            max_grad_norm=1.0,
            seed=seed,
            data_seed=seed,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            max_length=None,
            use_cpu=not _cuda(),
            bf16=False,  # SFTConfig defaults to bf16 and gradient checkpointing; the tiny models train in fp32
            activation_checkpointing=False,
            disable_tqdm=True,
            train_sampling_strategy="sequential" if sampling == "replacement" else "random",
            optim="adamw_torch",  # torch's AdamW, as the hand-written loop (sft_trainer_class)
        )
        with _quiet_datasets():  # TRL builds the labels with datasets.map, which draws a progress bar
            trainer = sft_trainer_class()(
                model=model,
                args=args,
                train_dataset=sft_dataset(rows),
                processing_class=tokenizer,
                callbacks=[Losses()],
            )
        trainer.remove_callback(PrinterCallback)  # disable_tqdm puts it in: it would print every step's logs
        trainer.train()
    model.train()
    return losses


def sft_trainer_class() -> type:
    """``SFTTrainer`` taking the hand-written loop's steps bit for bit (with ``optim="adamw_torch"``: torch's AdamW,
    not transformers' default fused kernel, whose rounding differs):

    * the schedule is transformers' own (``lr_scheduler_type``, ``warmup_steps``) read one step ahead during the
      warm-up: step ``s < w`` takes ``(s + 1) / w`` rather than ``s / w``, so the first step trains. It replaces
      ``create_scheduler``, the hook transformers names for a custom schedule (transformers 5.24
      ``Trainer.create_scheduler``: built once, when ``lr_scheduler`` is None);
    * the loss is the model's own (``labels`` are -100 off the agent tokens, so its mean over the batch's agent
      tokens), where TRL 1.16's ``SFTTrainer.compute_loss`` sums the fused LM head's log-probs and divides: the same
      value, rounded differently. :func:`sft` runs one process without gradient accumulation, where the two agree.

    Float-level differences matter here: the proofs' SFT runs are chaotic (two kernel settings part after about 40
    steps), so a loop that differs only in rounding lands at another accuracy (GSM8K's start: 14.7% against the old
    loop's 28.7% on the same rows and batches)."""
    import torch
    from transformers import get_scheduler
    from trl import SFTTrainer

    class SFTSteps(SFTTrainer):
        def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
            if self.lr_scheduler is None:
                warmup = self.args.get_warmup_steps(num_training_steps)
                probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)  # only for the factor function
                factor = get_scheduler(
                    self.args.lr_scheduler_type,
                    optimizer=probe,
                    num_warmup_steps=warmup,
                    num_training_steps=num_training_steps,
                ).lr_lambdas[0]
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                    optimizer or self.optimizer, lambda s: factor(s + 1) if s < warmup else factor(s)
                )
            return self.lr_scheduler

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None):
            outputs = model(**inputs)
            return (outputs.loss, outputs) if return_outputs else outputs.loss

    return SFTSteps


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    from datasets.utils.logging import disable_progress_bar, enable_progress_bar, is_progress_bar_enabled

    shown = is_progress_bar_enabled()
    disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            enable_progress_bar()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
