"""What GRPO and PPO share: the task dataset, one rollout engine per trainer, the failed-rows guard, the rollout
metrics gathered over every process and the env's start check (models load with
:mod:`agentgym_r1.adapters.loading`).

Both trainers train on the rows the engine returns (:class:`agentgym_r1.adapters.RolloutBatch`): the engine is given
the completion budget (``max_completion_length``), so an episode that reaches it ends there with
``end_reason="context_limit"`` and keeps only the reward it earned before; nothing is cut afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import torch

from agentgym_r1.adapters import (
    ChatTokenizer,
    Prompt,
    RolloutBatch,
    RolloutConfig,
    RolloutEngine,
    SamplingParams,
)
from agentgym_r1.adapters.backends.hf import HFBackend
from agentgym_r1.adapters.records import rollout_metrics
from agentgym_r1.error import AgentGymError, ConfigError


class RolloutFailedError(AgentGymError, RuntimeError):
    """Every row of ``max_failed_steps`` rollouts in a row failed (generation or env errors): training stopped
    instead of training on nothing."""


def task_dataset(num_tasks: int, seed: int = 0) -> Any:
    """Training rows: each ``prompt`` is the JSON reset of one episode (the env draws the task from its seed)."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": json.dumps({"seed": seed * 1_000_003 + i})} for i in range(num_tasks)])


class Rollouts:
    """One :class:`RolloutEngine` for a trainer's whole life (its env pool is kept across steps).

    ``make_env`` (a factory) replaces ``gym.make(args.env_id, **args.env_kwargs)``; ``backend`` (any token backend)
    replaces generation by the policy, e.g. a replaying backend in tests. Each :meth:`play` is given the backend to
    generate with (the policy, unwrapped for generation, or a vLLM engine).
    """

    def __init__(self, args: Any, tokenizer: Any, make_env: Any = None, backend: Any = None) -> None:
        self.args, self.make_env, self.fixed_backend = args, make_env, backend
        self.chat = ChatTokenizer(tokenizer)
        self.config = RolloutConfig(
            samples_per_prompt=1,
            max_context_tokens=args.max_prompt_tokens + args.max_completion_length,
            max_completion_tokens=args.max_completion_length,
            max_turns=args.max_turns,
            seed=None,
            env_backend=getattr(args, "env_backend", "thread"),
            env_workers=getattr(args, "env_workers", 0),
            ray_address=getattr(args, "ray_address", None),
            layout=getattr(args, "layout", "concatenated"),
            context=getattr(args, "context", "full"),
            sampling=SamplingParams(
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                top_p=getattr(args, "top_p", 1.0),
                top_k=getattr(args, "top_k", 0) or 0,
            ),
        )
        self.engine: RolloutEngine | None = None
        self.failed_streak = 0

    def prompts(self, resets: Sequence[dict[str, Any]]) -> list[Prompt]:
        """One engine prompt per reset: its seed and options, and the env's kwargs with the reset's own
        ``env_kwargs`` over them (a curriculum's ``difficulty``; :mod:`agentgym_r1.trainers.sampling`)."""
        env = self.make_env or self.args.env_id
        kwargs = {} if self.make_env else dict(self.args.env_kwargs)
        return [
            Prompt(env, {**kwargs, **r["env_kwargs"]} if "env_kwargs" in r else kwargs, r.get("seed"), r.get("options"))
            for r in resets
        ]

    def play(self, backend: Any, resets: Sequence[dict[str, Any]]) -> RolloutBatch:
        """One episode per reset, in order (TRL repeats each prompt ``num_generations`` times, so the samples of a
        group are consecutive and play the same task)."""
        backend = self.fixed_backend or backend
        if self.engine is None:
            self.engine = RolloutEngine(backend, self.chat, self.config)
        self.engine.backend = backend
        return self.engine.rollout(self.prompts(resets))

    @contextmanager
    def policy_backend(
        self, model: Any, accelerator: Any, gather_deepspeed3_params: bool = True, select: Any = None
    ) -> Any:
        """A transformers backend on ``model`` unwrapped for generation (:func:`agentgym_r1.trainers.sharding.
        unwrapped_for_generation`: DDP unwrapped; ZeRO-3 parameters gathered; FSDP2 shards gathered into a plain
        replica), generating with a neutral generation config so that the checkpoint's own processors (a repetition
        penalty, say) cannot change the sampling distribution away from the one the loss recomputes. ``select``
        picks the causal LM inside the unwrapped model (PPO's policy beside its critic)."""
        from agentgym_r1.trainers.sharding import unwrapped_for_generation

        with unwrapped_for_generation(model, accelerator, gather_deepspeed3_params, select) as m:
            yield HFBackend(m, self.chat, neutral=True)

    def check_failures(self, failed: int, rows: int, errors: Sequence[str]) -> None:
        """Count steps whose every row (over all processes) failed; stop after ``max_failed_steps`` in a row."""
        self.failed_streak = self.failed_streak + 1 if rows and failed == rows else 0
        if self.failed_streak >= self.args.max_failed_steps:
            first = next((e for e in errors if e), "no error message")
            raise RolloutFailedError(
                f"every rollout row failed in {self.failed_streak} steps in a row (max_failed_steps="
                f"{self.args.max_failed_steps}); the last error: {first}. Fix the generation backend or the env "
                "(the error says which) instead of training on nothing."
            )

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def gathered_rollout_metrics(env_id: str, batch: RolloutBatch, accelerator: Any) -> dict[str, float]:
    """The batch's rollout metrics (:func:`agentgym_r1.adapters.records.rollout_metrics`) over the episodes of every
    process: the sums of :meth:`RolloutBatch.metric_sums` gathered, then divided."""
    sums = batch.metric_sums()
    local = torch.tensor(list(sums.values()), dtype=torch.float64, device=accelerator.device)
    return rollout_metrics(dict(zip(sums, accelerator.reduce(local, reduction="sum").tolist(), strict=True)), env_id)


def check_env_builds(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Make the env and reset it once, so that an unknown id or a misspelt option fails at start with the env's own
    error instead of a run that "trains" on env errors (every episode an ``env_error`` row with reward 0)."""
    import gymnasium as gym

    import agentgym_r1

    try:
        env = gym.make(env_id, **env_kwargs)
    except gym.error.Error as e:
        raise ConfigError(f"env_id={env_id!r}: {e}. Registered ids: {', '.join(agentgym_r1.env_ids())}.") from None
    except TypeError as e:  # an option the env does not take (UnknownOptionError is a TypeError too)
        raise ConfigError(f"env_kwargs={env_kwargs!r} for {env_id}: {e}") from None
    except AgentGymError:  # the env's own named error (a data source that does not exist, a bad option value)
        raise
    except (ValueError, KeyError) as e:
        raise ConfigError(
            f"env_kwargs={env_kwargs!r} for {env_id}: the env refused them ({type(e).__name__}: "
            f"{e}). Fix the option the message names."
        ) from e
    try:
        env.reset(seed=0)
    except AgentGymError:
        raise
    except Exception as e:  # an env whose first reset raises would fail every episode of the run
        raise ConfigError(
            f"env_id={env_id!r} with env_kwargs={env_kwargs!r}: the first reset raised "
            f"{type(e).__name__}: {e}. Fix the env's options."
        ) from e
    finally:
        env.close()


def check_processes(accelerator: Any) -> None:
    """Refuse a launch whose processes did not join one process group: ``torchrun --nproc_per_node N`` sets
    ``WORLD_SIZE=N``, but on a machine without a GPU accelerate 1.15 joins the processes (gloo) only when the state
    is made with ``cpu=True`` (``PartialState._prepare_backend``; the trainers pass ``use_cpu``), so each process
    would train its own copy of the model on its own batches, silently."""
    import os

    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > accelerator.num_processes:
        raise ConfigError(
            f"{launched} processes were launched (WORLD_SIZE={launched}) but the trainer runs on "
            f"{accelerator.num_processes}: they did not join one process group, so each would train alone. On a "
            "machine without a GPU set use_cpu=True (accelerate then joins them with gloo), and if your script makes "
            "an accelerate PartialState before the trainer, make it with PartialState(cpu=True)."
        )
