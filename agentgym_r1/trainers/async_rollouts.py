"""Asynchronous GRPO rollouts (``max_staleness: N >= 1``): the next batches are generated in another process while
the trainer updates, and the loss corrects for the policy that sampled them with truncated importance sampling.

**Why not TRL's ``AsyncGRPOTrainer``** (``trl.experimental.async_grpo``, read at TRL 1.16): its rollout worker
samples single-turn completions from a ``vllm serve`` process on a CUDA device and pushes the weights to it over
NCCL (``weight_transfer.WeightTransferClient``), and it is a separate trainer (``_BaseTrainer``), not a
``GRPOTrainer``, so it has none of this trainer's multi-turn env rollouts, advantages, masks or step layout.
What is taken from TRL is the loss's correction: :func:`truncated_is_weights` is TRL's vLLM importance-sampling
correction (``GRPOTrainer._generate_and_score_completions``, ``vllm_importance_sampling_mode="token_truncate"``:
``min(exp(logp_current - logp_sampling), cap)`` per token, the cap defaulting to TRL's ``clip_max`` of 3.0), here with
the sampling log-probs of the stale policy; and TRL's ``RepeatSampler`` gives the task order.

**The pipeline** (one training process; the transformers backend in the generator process). At its ``k``-th
generation the trainer (at policy version ``v``, its optimizer updates so far) makes sure the batches
``k .. k+N`` are queued, each new one with ``min_version = v`` (the generator waits for those weights before
playing it), then takes batch ``k``. Batch ``k`` was queued ``N`` generations earlier, so with one update per
generation it is at most ``N`` versions old; a batch older than that (generation fell behind) is dropped, counted
and played again with the current weights. The tasks are those TRL hands ``rollout_func`` at the same step, taken
ahead of time from a copy of TRL's sampler, so the rows play the tasks the synchronous loop would. After each
update the weights are pushed (:class:`PushWeights`). The loss then sees, per token, the importance weight of the
current policy (the proximal one of decoupled PPO) against the sampling one, folded into the advantages: every loss
of TRL 1.16's ``_compute_loss`` is linear in a non-negative scaling of the advantage of a token (the clipped
``-min(r A, clip(r) A)`` too), and TRL's own vLLM correction multiplies the same per-token loss before the KL term.

Logged (``async/*``): staleness mean, max and histogram, dropped rows, importance-ratio statistics, the share of
wall time the trainer waited for rollouts, generator restarts. A generator that dies is restarted (up to
``max_restarts`` times) with the newest weights and its unfinished batches; past that, or when it raises, the run
stops with :class:`GeneratorDiedError` / :class:`AsyncRolloutError`; a batch that takes longer than ``timeout``
seconds stops it with :class:`~agentgym_r1.error.WorkerTimeout`. No wait is unbounded.

The generator is started with ``spawn`` (:mod:`agentgym_r1.trainers.async_generator`), which imports the script that
started training in the new process: a script that trains with ``max_staleness >= 1`` must call its training from
under ``if __name__ == "__main__":`` (``python -m agentgym_r1.trainers.grpo`` and the CLI do).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import pickle
import queue
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from agentgym_r1.adapters import RolloutBatch
from agentgym_r1.error import AgentGymError, ConfigError, WorkerDied, WorkerTimeout
from agentgym_r1.trainers.async_generator import GeneratorSpec, generator_main, rollout_args, weights_bytes

DEFAULT_IS_CAP = 3.0  # TRL 1.16 GRPOConfig.vllm_importance_sampling_clip_max
BATCH_TIMEOUT_S = 1800.0
MAX_RESTARTS = 2
POLL_S = 0.5


class AsyncRolloutError(AgentGymError, RuntimeError):
    """The rollout generator process raised; the message has its traceback."""


class GeneratorDiedError(WorkerDied):
    """The rollout generator process exited (killed, out of memory) more often than it may be restarted."""


def check_async_config(args: Any) -> None:
    """At config time: ``max_staleness >= 1`` only where the generator process can serve it."""
    n = args.max_staleness
    if not n:
        return
    given = f"max_staleness={n}"
    if args.use_vllm:
        raise ConfigError(
            f"{given} with use_vllm=True: TRL builds the vLLM engine in the training process (colocate) or syncs a "
            "server over NCCL, so it cannot generate in the generator process while the trainer updates. Set "
            "use_vllm: false (the generator process samples with transformers) or max_staleness: 0."
        )
    if args.layout != "concatenated":
        raise ConfigError(
            f"{given} with layout={args.layout!r}: asynchronous rollouts serve the concatenated layout (one row per "
            "episode, TRL's batch). Set layout: concatenated, or max_staleness: 0 for the step layout."
        )
    if args.num_iterations != 1 or args.steps_per_generation != args.gradient_accumulation_steps:
        raise ConfigError(
            f"{given} with num_iterations={args.num_iterations}, steps_per_generation={args.steps_per_generation}, "
            f"gradient_accumulation_steps={args.gradient_accumulation_steps}: staleness is counted in optimizer "
            "updates and needs one update per generated batch. Set num_iterations: 1 and steps_per_generation "
            "equal to gradient_accumulation_steps (or leave steps_per_generation out), or max_staleness: 0."
        )
    if args.resume_from_checkpoint not in (None, False, ""):
        raise ConfigError(
            f"{given} with resume_from_checkpoint={args.resume_from_checkpoint!r}: on resume TRL skips the batches "
            "already trained on, which the generator's copy of TRL's sampler cannot follow. Resume with "
            "max_staleness: 0 (set it again in a new run from the checkpoint's model)."
        )
    if args.world_size > 1:
        raise ConfigError(
            f"{given} on {args.world_size} processes: one generator process serves one training process. Train on "
            "one process, or set max_staleness: 0."
        )


def truncated_is_weights(
    current: torch.Tensor, sampling: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token ``min(exp(current - sampling), cap)`` on ``mask`` (1 elsewhere), TRL's ``token_truncate``
    correction, and statistics of the raw ratio over the masked tokens (``async/is_ratio_*``, ``async/is_clipped``:
    the share of them capped). A NaN sampling log-prob gives a ratio of 1, as in TRL."""
    diff = torch.nan_to_num((current - sampling) * mask, nan=0.0)
    ratio = torch.exp(diff)
    on = mask.bool()
    raw = ratio[on]
    stats = {
        "async/is_ratio_mean": raw.mean().item() if raw.numel() else 1.0,
        "async/is_ratio_min": raw.min().item() if raw.numel() else 1.0,
        "async/is_ratio_max": raw.max().item() if raw.numel() else 1.0,
        "async/is_clipped": (raw > cap).float().mean().item() if raw.numel() else 0.0,
    }
    return torch.clamp(ratio, max=cap), stats


def corrected_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The advantages (one per row or one per token) times the per-token importance weights."""
    return (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages) * weights


def task_stream(dataset: Any, generations: int, batch: int, shuffle: bool, seed: int) -> Iterator[list[str]]:
    """The prompts of each generation, in the order TRL's train dataloader hands them to ``rollout_func`` on one
    process: TRL 1.16 ``GRPOTrainer._get_train_sampler`` is a ``RepeatSampler`` with this seed whose chunks of
    ``batch // generations`` tasks repeat ``steps_per_generation`` times, and only the first repeat is generated
    for; a new permutation each epoch."""
    from trl.trainer.utils import RepeatSampler

    sampler = RepeatSampler(
        dataset, mini_repeat_count=generations, batch_size=batch // generations, shuffle=shuffle, seed=seed
    )
    indices = itertools.chain.from_iterable(iter(sampler) for _ in itertools.count())
    while True:
        yield [dataset[i]["prompt"] for i in itertools.islice(indices, batch)]


class AsyncRollouts:
    """The trainer's side of the pipeline (see the module docstring): the generator process, the task queue ahead of
    the trainer, the received batches and the counters."""

    def __init__(
        self,
        spec: GeneratorSpec,
        tasks: Iterator[list[str]],
        max_staleness: int,
        *,
        timeout: float = BATCH_TIMEOUT_S,
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        self.spec, self.stream, self.max_staleness = spec, tasks, max_staleness
        self.timeout, self.max_restarts = timeout, max_restarts
        self.context = mp.get_context("spawn")
        self.process: Any = None
        self.prompts: dict[int, list[str]] = {}  # index -> its tasks, until the batch is taken
        self.pending: dict[int, int] = {}  # index -> min_version, until the batch is received
        self.received: dict[int, tuple[int, RolloutBatch]] = {}
        self.submitted = self.consumed = 0
        self.weights: tuple[int, bytes] | None = None
        self.dropped_rows = self.restarts = 0
        self.waited = 0.0
        self.started_at: float | None = None
        self.staleness: list[int] = []

    # -- the process --------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the generator with fresh queues; the newest weights and every unfinished batch go to it."""
        self.tasks, self.weight_queue, self.results = (self.context.Queue() for _ in range(3))
        self.process = self.context.Process(
            target=generator_main,
            args=(self.spec, self.tasks, self.weight_queue, self.results),
            name="agentgym-rollout-generator",
            daemon=True,
        )
        self.process.start()
        if self.weights is not None:
            self.weight_queue.put(self.weights)
        for index, min_version in sorted(self.pending.items()):
            self.tasks.put((index, _resets(self.prompts[index]), min_version))

    def push(self, version: int, model: Any) -> None:
        """Send the policy's weights after ``version`` updates (the generator loads the newest it has)."""
        self.weights = (version, weights_bytes(model))
        if self.process is not None:
            self.weight_queue.put(self.weights)

    def close(self) -> None:
        """Stop the generator: asked first, then terminated, then killed, each with a bounded wait (it holds
        nothing that outlives it: its envs and its copy of the policy)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.is_alive():  # between batches it stops at once; waiting for weights it is terminated
            self.tasks.put(None)
            process.join(timeout=2)
        for stop in (process.terminate, process.kill):
            if process.is_alive():
                stop()
                process.join(timeout=10)
        for q in (self.tasks, self.weight_queue, self.results):
            q.cancel_join_thread()  # a full pipe to a dead reader must not block this process's exit
            q.close()

    # -- batches ------------------------------------------------------------------------------------------------------
    def next_batch(self, version: int, prompts: Sequence[str]) -> RolloutBatch:
        """The batch for this generation, played by a policy at most ``max_staleness`` updates older than
        ``version``; batches past that are dropped and played again."""
        start = time.perf_counter()
        if self.started_at is None:
            self.started_at = start
            self.start()
        elif not self.process.is_alive():  # found dead between batches: what it had queued is played again
            self._restart()
        while self.submitted <= self.consumed + self.max_staleness:
            self._submit(self.submitted, next(self.stream), version)
            self.submitted += 1
        index = self.consumed
        if list(prompts) != self.prompts[index]:
            raise AsyncRolloutError(
                f"generation {index}: TRL handed other tasks than its sampler's copy gave ahead of time (resumed "
                "from a checkpoint, or a custom sampler?). Asynchronous rollouts need TRL's RepeatSampler order; "
                "set max_staleness: 0 for this run."
            )
        while True:
            played, batch = self._wait(index)
            del self.received[index]
            if version - played <= self.max_staleness:
                break
            self.dropped_rows += len(batch.samples)
            self._submit(index, self.prompts[index], version)
        del self.prompts[index]
        self.consumed += 1
        self.waited += time.perf_counter() - start
        self.staleness = [version - played] * len(batch.samples)
        return batch

    def _submit(self, index: int, prompts: list[str], min_version: int) -> None:
        self.prompts[index], self.pending[index] = prompts, min_version
        self.tasks.put((index, _resets(prompts), min_version))

    def received_version(self, index: int) -> int:
        """Wait for batch ``index`` (bounded, as every wait here) and return the version that played it."""
        return self._wait(index)[0]

    def _wait(self, index: int) -> tuple[int, RolloutBatch]:
        deadline = time.monotonic() + self.timeout
        while index not in self.received:
            try:
                message = self.results.get(timeout=POLL_S)
            except queue.Empty:
                if not self.process.is_alive():
                    self._restart()
                    deadline = time.monotonic() + self.timeout
                elif time.monotonic() > deadline:
                    self.close()
                    raise WorkerTimeout(
                        f"the rollout generator gave no batch in {self.timeout:g} s (generation {index}); it was "
                        "stopped. Lower the batch size or max_new_tokens, or set max_staleness: 0."
                    ) from None
                continue
            if message[0] == "error":
                raise AsyncRolloutError(f"the rollout generator process raised:\n{message[1]}")
            _, got, played, batch = message
            if got in self.pending:
                del self.pending[got]
                self.received[got] = (played, batch)
        return self.received[index]

    def _restart(self) -> None:
        code = self.process.exitcode
        if self.restarts >= self.max_restarts:
            self.close()
            raise GeneratorDiedError(
                f"the rollout generator process exited with code {code} (killed, out of memory or crashed), after "
                f"{self.restarts} restart(s) (at most {self.max_restarts}). Look for the cause in the system log "
                "(dmesg for the OOM killer), lower the generation batch, or set max_staleness: 0."
            )
        self.restarts += 1
        self.close()
        self.start()

    def metrics(self) -> dict[str, float]:
        """The ``async/*`` metrics after a batch was taken (the importance ratios come from the loss)."""
        rows = self.staleness or [0]
        out = {
            "async/staleness_mean": sum(rows) / len(rows),
            "async/staleness_max": float(max(rows)),
            "async/dropped_rows": float(self.dropped_rows),
            "async/generator_restarts": float(self.restarts),
            "async/wait_share": self.waited / max(time.perf_counter() - (self.started_at or 0.0), 1e-9),
        }
        for s in range(self.max_staleness + 1):
            out[f"async/staleness_{s}"] = sum(r == s for r in rows) / len(rows)
        return out


def _resets(prompts: Sequence[str]) -> list[dict[str, Any]]:
    import json

    return [json.loads(p) for p in prompts]


def generator_spec(trainer: Any, make_env: Any) -> GeneratorSpec:
    """The generator's spec from a trainer: its unwrapped model's config and dtype, its tokenizer, the rollout
    fields of its config and ``make_env`` (refused here when it cannot be sent to another process)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if getattr(model, "peft_config", None):
        raise ConfigError(
            f"max_staleness={trainer.args.max_staleness} with a PEFT (LoRA) model: the generator process loads a "
            "full model's weights. Set max_staleness: 0 with LoRA."
        )
    if make_env is not None:
        try:
            pickle.dumps(make_env)
        except Exception as e:
            raise ConfigError(
                f"max_staleness={trainer.args.max_staleness} with make_env={make_env!r}, which cannot be pickled to "
                f"the generator process ({type(e).__name__}: {e}). Give a class or a module-level function, or "
                "register the env and set env_id."
            ) from e
    return GeneratorSpec(
        model.config,
        next(model.parameters()).dtype,
        trainer.processing_class,
        rollout_args(trainer.args),
        make_env,
        int(trainer.args.seed) + 1,
        torch.get_num_threads(),
    )


class PushWeights(TrainerCallback):
    """After each optimizer update, the policy's weights go to the generator; at the end of training it stops."""

    def __init__(self, rollouts: AsyncRollouts, trainer: Any) -> None:
        self.rollouts, self.trainer = rollouts, trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rollouts.push(state.global_step, self.trainer.accelerator.unwrap_model(self.trainer.model))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rollouts.push(state.global_step, self.trainer.accelerator.unwrap_model(self.trainer.model))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rollouts.close()
