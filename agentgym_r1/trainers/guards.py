"""Stop a run whose weights or loss stop being finite, before anything is saved from it.

Without this a diverged run looks like a finished one: transformers' ``logging_nan_inf_filter`` (on by default)
replaces a NaN or inf step loss with the mean of the logged ones (``Trainer._inner_training_loop``), so the log shows
finite losses, and ``save_model`` writes the NaN weights and the command exits 0 (``learning_rate: .inf`` once saved
108,224 of 108,224 weights as NaN). :class:`FiniteGuard` checks the weights after every optimizer step and the
logged loss, and raises :class:`TrainingDivergedError` on every process at once.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from transformers import TrainerCallback

from agentgym_r1.error import AgentGymError


class TrainingDivergedError(AgentGymError, RuntimeError):
    """The weights (or the logged loss) stopped being finite: training stopped, and nothing of it was saved after
    the last finite checkpoint."""


def weight_sums(model: torch.nn.Module) -> torch.Tensor:
    """One float32 sum per parameter tensor, on the parameters' device: finite exactly when every element is
    finite and the sum does not overflow (weights past ~1e38 in total, which is divergence as well)."""
    sums = [local(p).sum(dtype=torch.float32) for p in model.parameters() if local(p).numel()]
    return torch.stack(sums) if sums else torch.zeros(1)


def local(p: torch.Tensor) -> torch.Tensor:
    """This process's part of a parameter: its shard under FSDP2 (a ``DTensor``; the verdict is reduced over the
    processes anyway), the tensor itself otherwise."""
    to_local = getattr(p, "to_local", None)
    return (to_local() if to_local is not None else p).detach()


def count_non_finite(model: torch.nn.Module) -> tuple[int, int]:
    """How many weights (of this process's shards) are NaN or infinite, and how many there are."""
    bad = sum(int((~torch.isfinite(local(p))).sum()) for p in model.parameters())
    return bad, sum(local(p).numel() for p in model.parameters())


class FiniteGuard(TrainerCallback):
    """After every optimizer step: all weights finite, on every process (the verdict is summed over processes with
    ``accelerator.reduce``, so all of them raise together and none waits in a collective); at every log: a finite
    loss. Raises :class:`TrainingDivergedError`, which stops ``train()`` before the next checkpoint or the final
    ``save_model``."""

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator
        self.last_logs: dict[str, float] = {}

    def on_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        sums = weight_sums(model)
        bad = (~torch.isfinite(sums)).sum().to(self.accelerator.device, dtype=torch.float32)
        if float(self.accelerator.reduce(bad, reduction="sum")) == 0:
            return
        nan, total = count_non_finite(model)
        seen = {k: self.last_logs[k] for k in ("loss", "grad_norm") if k in self.last_logs}
        raise TrainingDivergedError(
            f"optimizer step {state.global_step + 1}: {nan:,} of {total:,} weights are NaN or infinite (or their "
            f"sum overflowed) after the update (learning_rate={args.learning_rate}, max_grad_norm="
            f"{args.max_grad_norm}; last logged {seen or 'nothing yet'}). Training stopped; nothing from this step "
            "on was saved. Lower learning_rate, keep gradient clipping on (max_grad_norm: 1.0), or check the model's "
            "weights and the rewards."
        )

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        logs = logs or {}
        self.last_logs.update({k: v for k, v in logs.items() if isinstance(v, int | float)})
        loss = logs.get("loss")
        if isinstance(loss, int | float) and not math.isfinite(loss):
            raise TrainingDivergedError(
                f"step {state.global_step}: the training loss is {loss}. Training stopped before saving. Lower "
                "learning_rate, keep gradient clipping on (max_grad_norm: 1.0), or check the rewards."
            )
