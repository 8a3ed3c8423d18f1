"""What the multi-turn CPU proofs of learning share (``train_webshop_proof.py``, ``train_alfworld_proof.py``): greedy
play through the rollout engine, held-out monitoring along a GRPO run, and the GRPO config of a tiny model on CPU."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Limits:
    """An episode's bounds: ``turns``, tokens per turn (``new_tokens``), the first prompt's tokens (``prompt``) and
    what follows it, agent and env tokens together (``completion``)."""

    turns: int
    new_tokens: int
    prompt: int
    completion: int


def greedy_episodes(model: Any, tokenizer: Any, prompts: Sequence[Any], limits: Limits, chunk: int = 256) -> list[Any]:
    """The episodes of ``model`` on ``prompts`` (:class:`~agentgym_r1.adapters.Prompt`) within ``limits``, greedy,
    ``chunk`` at a time; the model is put back in the mode it was in."""
    from agentgym_r1.adapters import ChatTokenizer, RolloutConfig, RolloutEngine, SamplingParams
    from agentgym_r1.adapters.backends.hf import HFBackend

    chat = ChatTokenizer(tokenizer)
    config = RolloutConfig(
        max_turns=limits.turns,
        max_context_tokens=limits.prompt + limits.completion,
        max_completion_tokens=limits.completion,
        seed=None,
        sampling=SamplingParams(max_new_tokens=limits.new_tokens, temperature=0.0),
    )
    was_training = model.training
    engine = RolloutEngine(HFBackend(model, chat, neutral=True), chat, config)
    episodes: list[Any] = []
    try:
        for i in range(0, len(prompts), chunk):
            episodes += engine.rollout(list(prompts[i : i + chunk])).episodes
    finally:
        engine.close()
        model.train(was_training)
    return episodes


def load_checkpoint(path: Path) -> tuple[Any, Any]:
    """The tokenizer and model saved at ``path`` (``PreTrainedTokenizerFast``: transformers 5's ``AutoTokenizer``
    would rebuild the tiny tokenizer as Qwen2's)."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)


class Curve:
    """Held-out monitoring along a GRPO run (the ``evaluate`` of :class:`~agentgym_r1.trainers.budget.EveryUpdates`
    or :class:`~agentgym_r1.trainers.budget.WallClockBudget`): ``monitor(model)`` gives a point's figures, written to
    ``path`` with the step, the training seconds and the wall seconds, and printed with ``fmt``."""

    def __init__(self, monitor: Callable[[Any], dict[str, Any]], path: Path, fmt: Callable[[dict[str, Any]], str]):
        self.monitor, self.path, self.fmt = monitor, path, fmt
        self.start, self.points = time.time(), []

    def __call__(self, step: int, model: Any, seconds: float) -> None:
        point = {"step": step, "seconds": seconds, **self.monitor(model)}
        if step == 0:  # wall time counts from the end of the first check, as training time does
            self.start = time.time()
        self.points.append({**point, "wall": time.time() - self.start})
        self.path.write_text(json.dumps(self.points, indent=1))
        print(
            f"grpo step {step:4d}  held-out {self.fmt(point)}  training {seconds:.0f}s, "
            f"wall {self.points[-1]['wall']:.0f}s",
            flush=True,
        )


def cpu_grpo_config(
    output_dir: Path,
    *,
    env_id: str,
    env_kwargs: dict[str, Any],
    limits: Limits,
    prompts: int,
    generations: int,
    lr: float,
    temperature: float,
    seed: int,
    steps: int | None,
) -> Any:
    """GRPO of a tiny model on one CPU process: ``prompts`` tasks x ``generations`` samples a step, no KL term, fp32,
    nothing saved by the trainer. With ``steps``, exactly that many updates, the lr on a cosine over them; without,
    a constant lr and no step limit (a wall-clock run: :class:`~agentgym_r1.trainers.budget.WallClockBudget` stops
    it and sets its cosine)."""
    from agentgym_r1.trainers.configs import AgentGRPOConfig

    return AgentGRPOConfig(
        output_dir=str(output_dir),
        env_id=env_id,
        env_kwargs=env_kwargs,
        max_turns=limits.turns,
        max_new_tokens=limits.new_tokens,
        max_prompt_tokens=limits.prompt,
        max_completion_length=limits.completion,
        num_generations=generations,
        per_device_train_batch_size=prompts * generations,
        learning_rate=lr,
        lr_scheduler_type="cosine" if steps else "constant",
        beta=0.0,
        temperature=temperature,
        max_steps=steps or 100_000,
        logging_steps=5,
        report_to="none",
        gradient_checkpointing=False,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=seed,
        data_seed=seed,
    )
