"""Training budgets for any ``transformers.Trainer`` (TRL's GRPO, our PPO). :class:`EveryUpdates` evaluates along a
run whose budget is a number of updates (``max_steps``: the trainer stops it and its own schedule sets the learning
rate), the budget a study uses so that the load on a machine cannot change a result. :class:`WallClockBudget` stops
after so many minutes, takes the learning rate from its initial value to zero on a cosine over those minutes, and
evaluates along the way.

A step-count schedule needs the machine's speed in advance; a time budget does not. transformers has no such
option (``TrainingArguments`` counts steps or epochs), so :class:`WallClockBudget` does it from the callback events:
``on_train_begin`` receives the trainer's ``lr_scheduler`` (transformers 5.23: ``Trainer._inner_training_loop`` calls
``_prepare_for_training``, which builds it, before ``callback_handler.on_train_begin``), a ``LambdaLR`` for the
schedules ``"constant"``, ``"linear"`` and ``"cosine"``, whose factor functions are replaced by one of elapsed time; and
``on_step_end`` may set ``control.should_training_stop``, which the loop checks after each step.

Under several processes (``accelerate launch``, ``torchrun``) each process has its own clock, and they drift apart by
the time one waits for another. A process that stops a step before the others leaves them waiting in the next
gradient all-reduce until the process group times out, and a learning rate taken from each process's own clock
differs between processes, so their parameters part ways (DDP averages the gradients, not the optimizer steps).
The budget therefore reads one clock, the main process's: ``on_step_end`` broadcasts its seconds to every process
(accelerate's ``broadcast_object_list`` from process 0), and both the stop and the learning rate use that figure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from agentgym_r1.error import ConfigError

Evaluate = Callable[[int, Any, float], None]  # (global step, model, seconds of training so far)


class WallClockBudget(TrainerCallback):
    """Stops training once ``minutes`` of training have passed and, with ``cosine``, scales the learning rate by
    ``0.5 * (1 + cos(pi * elapsed / budget))``. With ``evaluate``, calls ``evaluate(step, model, seconds)`` when
    training begins (step 0), every ``every`` steps, and at the step that spends the budget.

    ``count_evaluation``: whether the time ``evaluate`` takes counts as training time (``False``: the budget and the
    schedule see training alone, so a run's figures do not depend on how often it was evaluated). ``clock``: the
    time source, in seconds (``time.monotonic``). Under several processes the main process's clock decides the stop
    and the learning rate for all of them, and ``evaluate`` runs on every process at the same steps (split its work
    by rank, or let the main process do it while the others wait at the next collective)."""

    def __init__(
        self,
        minutes: float,
        *,
        cosine: bool = True,
        evaluate: Evaluate | None = None,
        every: int = 0,
        evaluate_at_start: bool = True,
        count_evaluation: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(minutes, int | float) or isinstance(minutes, bool) or not minutes > 0:
            raise ConfigError(f"minutes must be a positive number, got {minutes!r}")
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise ConfigError(f"every must be an int >= 0 (0: evaluate only at the start and the stop), got {every!r}")
        self.budget, self.cosine, self.evaluate, self.every = 60.0 * minutes, cosine, evaluate, every
        self.evaluate_at_start, self.count_evaluation, self.clock = evaluate_at_start, count_evaluation, clock
        self.start, self.evaluating, self.elapsed = clock(), 0.0, 0.0

    def seconds(self) -> float:
        """Seconds of training so far on this process's clock (less the evaluations unless ``count_evaluation``)."""
        return self.clock() - self.start - (0.0 if self.count_evaluation else self.evaluating)

    def spent(self) -> float:
        """The share of the budget spent at the last step's end, in [0, 1] (the same on every process)."""
        return min(1.0, self.elapsed / self.budget)

    def factor(self, _step: int = 0) -> float:
        """The learning-rate factor now: the cosine of the budget spent (1 without ``cosine``)."""
        return 0.5 * (1.0 + math.cos(math.pi * self.spent())) if self.cosine else 1.0

    def _evaluate(self, step: int, model: Any) -> None:
        if self.evaluate is None:
            return
        begin = self.clock()
        self.evaluate(step, model, self.seconds())
        self.evaluating += self.clock() - begin

    def on_train_begin(self, args, state, control, lr_scheduler=None, model=None, **kwargs):
        self.start, self.evaluating, self.elapsed = self.clock(), 0.0, 0.0
        if self.cosine:
            if lr_scheduler is None or not hasattr(lr_scheduler, "lr_lambdas"):
                raise ConfigError(
                    f"WallClockBudget(cosine=True) needs a LambdaLR schedule (lr_scheduler_type "
                    f"'constant', 'linear' or 'cosine'), got {type(lr_scheduler).__name__}; set "
                    "lr_scheduler_type='constant' or pass cosine=False"
                )
            lr_scheduler.lr_lambdas = [self.factor] * len(lr_scheduler.lr_lambdas)
        if self.evaluate_at_start:
            self._evaluate(state.global_step, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # transformers 5.23 `_inner_training_loop` runs `lr_scheduler.step()` before `on_step_end`, so the factor the
        # scheduler takes at step k is the one of step k - 1's end: one figure per step, the same on every process
        self.elapsed = _main_process_seconds(self.seconds())
        done = self.elapsed >= self.budget
        if (self.every and state.global_step % self.every == 0) or done:
            self._evaluate(state.global_step, model)
        if done:
            control.should_training_stop = True
        return control


class EveryUpdates(TrainerCallback):
    """Calls ``evaluate(step, model, seconds)`` when training begins (step 0), every ``every`` updates, and at update
    ``steps`` (the run's ``max_steps``), with the seconds since training began (evaluations included). It never stops
    the run or touches the learning rate: the trainer's ``max_steps`` and ``lr_scheduler_type`` do."""

    def __init__(self, evaluate: Evaluate, every: int, steps: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise ConfigError(f"every must be an int >= 0 (0: evaluate only at the start and the end), got {every!r}")
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ConfigError(f"steps must be the run's number of updates, an int >= 1, got {steps!r}")
        self.evaluate, self.every, self.steps, self.clock = evaluate, every, steps, clock
        self.start = clock()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.start = self.clock()
        self.evaluate(state.global_step, model, 0.0)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if (self.every and state.global_step % self.every == 0) or state.global_step >= self.steps:
            self.evaluate(state.global_step, model, self.clock() - self.start)
        return control


def _main_process_seconds(seconds: float) -> float:
    """``seconds`` as the main process measured them, on every process: accelerate's ``broadcast_object_list`` from
    process 0 (``torch.distributed`` under several processes; the list unchanged under one). The trainer has made
    accelerate's state by the time a step ends, so ``PartialState()`` here is the trainer's."""
    from accelerate.utils import broadcast_object_list

    return float(broadcast_object_list([seconds], from_process=0)[0])
