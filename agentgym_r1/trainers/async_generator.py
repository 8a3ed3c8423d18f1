"""The rollout generator process of asynchronous GRPO (:mod:`agentgym_r1.trainers.async_rollouts` starts it).

It holds its own copy of the policy (built from the trainer model's config, weights pushed by the trainer as
``torch.save`` bytes after each optimizer update) and its own rollout engine, and plays the batches of tasks the
trainer sends, each with the newest weights it has, never older than the task's ``min_version``. Three queues:

- ``tasks`` (trainer -> generator): ``(index, resets, min_version)``, or ``None`` to stop;
- ``weights`` (trainer -> generator): ``(version, bytes)``; only the newest one is loaded;
- ``results`` (generator -> trainer): ``("batch", index, version, RolloutBatch)`` or ``("error", traceback)``.

Every wait is a poll of :data:`POLL_S` seconds that also checks that the trainer is alive, so a generator never
outlives its trainer (it is a daemon process too). Started with the ``spawn`` method: the trainer's process has
OpenMP threads running, and a forked child that uses them can hang.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import queue
import traceback
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

POLL_S = 0.5

ROLLOUT_FIELDS = (
    "env_id",
    "env_kwargs",
    "max_prompt_tokens",
    "max_completion_length",
    "max_turns",
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "env_backend",
    "env_workers",
    "ray_address",
    "layout",
    "context",
    "max_failed_steps",
)
"""The config fields :class:`~agentgym_r1.trainers.common.Rollouts` reads, copied into the generator's spec (the
whole training config does not need to cross the process boundary)."""


@dataclass
class GeneratorSpec:
    """What the generator process is built from: all of it picklable (``make_env`` too: a class or a module-level
    function)."""

    model_config: Any
    dtype: Any
    tokenizer: Any
    rollout_args: SimpleNamespace
    make_env: Any
    seed: int
    threads: int


def rollout_args(args: Any) -> SimpleNamespace:
    """The fields of the training config the generator's rollout engine needs."""
    return SimpleNamespace(**{name: getattr(args, name, None) for name in ROLLOUT_FIELDS})


def weights_bytes(model: Any) -> bytes:
    """``model``'s state dict as ``torch.save`` bytes, copied to the CPU: a snapshot, so that the trainer's next
    update never changes weights the generator is sampling with (tensors sent through a queue as shared memory
    would be the live parameters)."""
    import torch

    buffer = io.BytesIO()
    torch.save({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def _load(model: Any, data: bytes) -> None:
    import torch

    model.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))


class _Weights:
    """The generator's policy and its version; :meth:`update` loads the newest weights waiting in the queue."""

    def __init__(self, spec: GeneratorSpec, weights: Any) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_config(spec.model_config).to(spec.dtype).eval()
        self.queue, self.version = weights, -1

    def update(self, at_least: int) -> None:
        """Load the newest pushed weights, waiting for them while their version is below ``at_least``."""
        newest = None
        while True:  # everything already waiting: only the last one counts
            try:
                newest = self.queue.get_nowait()
            except queue.Empty:
                break
        while (self.version if newest is None else newest[0]) < at_least:
            try:
                newest = self.queue.get(timeout=POLL_S)
            except queue.Empty:
                _check_parent()
        if newest is not None:
            self.version = newest[0]
            _load(self.model, newest[1])


def _check_parent() -> None:
    parent = mp.parent_process()
    if parent is not None and not parent.is_alive():
        raise SystemExit(0)


def generator_main(spec: GeneratorSpec, tasks: Any, weights: Any, results: Any) -> None:
    """The generator's loop (the target of the spawned process); see the module docstring."""
    try:
        _serve(spec, tasks, weights, results)
    except SystemExit:
        raise
    except BaseException:
        results.put(("error", traceback.format_exc()))
        raise SystemExit(1) from None


def _serve(spec: GeneratorSpec, tasks: Any, weights: Any, results: Any) -> None:
    import torch

    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.trainers.common import Rollouts

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    policy = _Weights(spec, weights)
    rollouts = Rollouts(spec.rollout_args, spec.tokenizer, spec.make_env, None)
    backend = HFBackend(policy.model, rollouts.chat, neutral=True)
    try:
        while True:
            try:
                task = tasks.get(timeout=POLL_S)
            except queue.Empty:
                _check_parent()
                continue
            if task is None:
                return
            index, resets, min_version = task
            policy.update(min_version)
            with torch.no_grad():
                batch = rollouts.play(backend, resets).stamp(policy.version)
            results.put(("batch", index, policy.version, batch))
    finally:
        rollouts.close()
