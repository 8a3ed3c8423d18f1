"""Multi-turn GRPO (and RLOO, REINFORCE++) on TRL's ``GRPOTrainer``, driven by env rollouts through ``rollout_func``.

TRL generates nothing here: ``rollout_func`` plays each prompt's episodes with the trainer's rollout engine and
returns the engine's rows (``RolloutBatch.to_trl(TRL_COLUMNS)``: prompt and completion ids, sampled logprobs and
``env_mask``, which TRL uses as its tool mask) and, in the :data:`ROW` column, each row's :class:`Sample` itself.
TRL writes that column into the inputs it scores, and :class:`AgentGRPOTrainer` reads the rows back from there (the
one path from rollout to loss: the trainer keeps no copy of the batch) to replace TRL's advantages with ours,
computed over the *global* batch (every process), as TRL computes its own: the chosen estimator over episode
rewards, process rewards credited to their step's tokens, StarPO-S group filtering, the ``loss_mask`` /
``advantage_mask`` switches of the Agent-R1 ablation, and rows whose episode failed left out of group statistics
and the loss.

Generation goes through the policy (transformers ``generate`` on the model unwrapped with TRL's
``unwrap_model_for_generation``) or, with ``use_vllm: true``, through the vLLM engine TRL built and synced.

Run: ``python -m agentgym_r1.trainers.grpo --config run.yaml`` or ``agentgym-r1 train grpo --config run.yaml``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import torch
from trl import GRPOTrainer

from agentgym_r1.adapters import RolloutBatch, Sample
from agentgym_r1.adapters.records import episode_rows, row_tensors
from agentgym_r1.trainers import advantages as A
from agentgym_r1.trainers import async_rollouts as AR
from agentgym_r1.trainers.common import (
    Rollouts,
    check_env_builds,
    check_processes,
    gathered_rollout_metrics,
    task_dataset,
)
from agentgym_r1.trainers.grpo_config import AgentGRPOConfig
from agentgym_r1.trainers.guards import FiniteGuard
from agentgym_r1.trainers.lora import base_model_context, trainer_peft_config
from agentgym_r1.trainers.sampling import SamplingStateCallback, TaskSampling
from agentgym_r1.trainers.sampling_config import check_levels
from agentgym_r1.trainers.signals import EchoTrapMonitor
from agentgym_r1.trainers.vllm import VLLMSync

TRL_COLUMNS = ("prompt_ids", "completion_ids", "logprobs", "env_mask")
"""The columns of :meth:`RolloutBatch.to_trl` that ``rollout_func`` hands TRL, beside :data:`ROW`: TRL 1.16's
``GRPOTrainer._generate`` requires ``prompt_ids``, ``completion_ids`` and ``logprobs`` and pops ``env_mask`` as its
``tool_mask``."""

ROW = "sample"
"""The ``rollout_func`` column holding each row's :class:`Sample` (the engine's object, not a copy). TRL 1.16 keeps
every key beyond its required ones as ``extra_fields`` (``GRPOTrainer._generate``) and writes them into the inputs it
scores, ``inp[key] = values[i]`` (``_generate_and_score_completions``; listed in :mod:`trl_surface`), where
:meth:`AgentGRPOTrainer._generate_and_score_completions` reads the rows back and TRL's reward call hands the column
to :func:`episode_reward`."""


def episode_reward(prompts: list[Any], completions: list[Any], sample: list[Sample], **_: Any) -> list[float | None]:
    """The env's summed reward of each episode (the :data:`ROW` column); ``None`` for a failed row, which TRL then
    leaves out of its logged reward statistics (``reward``, ``rewards/episode_reward/*``). The loss does not use it:
    our advantages replace TRL's."""
    return [None if row.failed else float(row.reward) for row in sample]


class AgentGRPOTrainer(VLLMSync, GRPOTrainer):
    """``GRPOTrainer`` whose completions are multi-turn env episodes; see the module docstring.

    ``make_env`` replaces ``gym.make(args.env_id, **args.env_kwargs)``; ``backend`` replaces generation (any token
    backend of :mod:`agentgym_r1.adapters.backends`, e.g. a replaying one for tests); ``rollouts`` replaces the env
    rollouts (:class:`agentgym_r1.trainers.agent_rollouts.AgentRollouts`: an agent function run against the proxy).
    """

    def __init__(
        self,
        model: Any,
        args: AgentGRPOConfig,
        processing_class: Any,
        train_dataset: Any = None,
        make_env: Callable[[], gym.Env] | None = None,
        backend: Any = None,
        rollouts: Rollouts | None = None,
        **kwargs: Any,
    ) -> None:
        if make_env is None and rollouts is None:
            check_env_builds(args.env_id, args.env_kwargs)
            check_levels(args)
        elif args.curriculum:
            from agentgym_r1.error import ConfigError

            raise ConfigError(
                f"curriculum={args.curriculum!r} with a make_env factory or agent rollouts: the curriculum sets each "
                "task's level as env_kwargs.difficulty, which they cannot take. Give env_id and env_kwargs instead."
            )
        self.rollouts = rollouts or Rollouts(args, processing_class, make_env, backend)
        self.echo_trap = EchoTrapMonitor(args.echo_trap_window, args.echo_trap_ratio)
        kwargs.setdefault("peft_config", trainer_peft_config(args, model))  # use_peft: TRL wraps the model
        super().__init__(
            model=model,
            reward_funcs=[episode_reward],
            args=args,
            train_dataset=train_dataset if train_dataset is not None else task_dataset(args.num_tasks),
            processing_class=processing_class,
            rollout_func=self._rollout,
            **kwargs,
        )
        check_processes(self.accelerator)
        self.add_callback(FiniteGuard(self.accelerator))  # NaN weights stop the run, never get saved
        # TRL would call a row truncated when it does not end in EOS; our turns end on </answer> or </tool_call>, so
        # we mask by the episode's end instead (see _row_mask).
        self.mask_truncated_completions = False
        self.skip_rows = self._resolve_skip_zero_advantage()
        self.sampling = TaskSampling(args, self.train_dataset, self.num_generations)  # dynamic sampling, curriculum
        self.add_callback(SamplingStateCallback(self.sampling))
        self.async_rollouts = self._async_rollouts(make_env, backend) if args.max_staleness else None

    def _async_rollouts(self, make_env: Any, backend: Any) -> AR.AsyncRollouts:
        """The generator process's pipeline (:mod:`agentgym_r1.trainers.async_rollouts`), started at the first
        rollout; its callback pushes the weights after each update."""
        if backend is not None:
            from agentgym_r1.error import ConfigError

            raise ConfigError(
                f"max_staleness={self.args.max_staleness} with a backend={backend!r}: the generator process samples "
                "with its own copy of the policy. Leave backend out, or set max_staleness: 0."
            )
        if self.accelerator.num_processes > 1:  # the config refuses it too (world_size), this is the launch's count
            from agentgym_r1.error import ConfigError

            raise ConfigError(f"max_staleness={self.args.max_staleness} needs one training process; set 0")
        args = self.args
        tasks = AR.task_stream(
            self.train_dataset, self.num_generations, args.generation_batch_size, args.shuffle_dataset, args.seed
        )
        pipeline = AR.AsyncRollouts(AR.generator_spec(self, make_env), tasks, args.max_staleness)
        self.add_callback(AR.PushWeights(pipeline, self))
        return pipeline

    def _resolve_skip_zero_advantage(self) -> bool:
        """Row skipping is exact only where a row with no advantage adds nothing to the loss *and* no other row's
        term depends on it: token-sum losses normalised by ``num_items_in_batch`` (dapo, cispo, vespo; TRL's
        ``_compute_loss``), no KL term, no entropy bonus or entropy mask (computed over the micro-batch) and no
        router aux loss. The config refuses an explicit ``True`` elsewhere; here the model's aux loss is known."""
        wanted = self.args.skip_zero_advantage
        if self.aux_loss_enabled and wanted:
            from agentgym_r1.error import ConfigError

            raise ConfigError(
                "skip_zero_advantage=True with a router aux loss: the aux loss is a mean over the "
                "micro-batch, so dropping rows changes it. Set skip_zero_advantage=false."
            )
        return bool(self.args.skip_rows_exact and not self.aux_loss_enabled if wanted is None else wanted)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``, the task sampling's state read back first from the checkpoint resumed."""
        self.sampling.resume(resume_from_checkpoint, self.args.output_dir)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    # -- generation ---------------------------------------------------------------------------------------------------
    def _rollout(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: the rows of :meth:`_play`, as TRL's columns and each row's :class:`Sample`."""
        batch = self._play(prompts)
        return {**batch.to_trl(TRL_COLUMNS), ROW: batch.samples}

    def _play(self, prompts: list[str]) -> RolloutBatch:
        """The episodes of ``prompts`` (JSON resets, each ``num_generations`` times in a row): from the asynchronous
        generator in training with ``max_staleness``, else played now by vLLM or the policy through the task
        sampling; the rollout metrics logged. Both layouts' one source of rows."""
        training = self.model.training
        if self.async_rollouts is not None and training:
            batch = self.async_rollouts.next_batch(self.state.global_step, prompts)
            for key, value in self.async_rollouts.metrics().items():
                self._metrics["train"][key].append(value)
        else:
            resets = [json.loads(p) for p in prompts]
            if self.args.use_vllm:  # weights synced in _generate
                play = partial(self.rollouts.play, self.vllm_rollout_backend(self.rollouts.chat))
                batch = self.sampling.play(play, resets, training)
            else:
                with self.rollouts.policy_backend(
                    self.model_wrapped, self.accelerator, self.args.ds3_gather_for_generation
                ) as backend:
                    batch = self.sampling.play(partial(self.rollouts.play, backend), resets, training)
            if training and self.sampling.active:
                for key, value in self.sampling.metrics.items():
                    self._metrics["train"][key].append(value)
            batch.stamp(self.state.global_step)
        self._log_rollout_metrics("train" if training else "eval", batch)
        return batch

    def _generate(self, prompts: list[Any]) -> Any:
        if self.args.use_vllm and self.state.global_step != self._last_loaded_step:
            # before TRL's own check in GRPOTrainer._generate, which then sees the step synced and skips its sync
            self.sync_vllm_weights()
            self._last_loaded_step = self.state.global_step
        out = super()._generate(prompts)
        # TRL 1.16 appends its own completions/clipped_ratio once per _generate (grpo_trainer.py:2304: rows not
        # ending in EOS), after rollout_func, where _play logged ours (episodes cut by the budget): drop TRL's
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["completions/clipped_ratio"].pop()
        return out

    def _log_rollout_metrics(self, mode: str, batch: RolloutBatch) -> None:
        """Rollout metrics over every process; in training, stop after ``max_failed_steps`` all-failed steps."""
        metrics = gathered_rollout_metrics(self.args.env_id, batch, self.accelerator)
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        if mode == "train":
            episodes = torch.tensor(len(batch.episodes), device=self.accelerator.device)
            self.rollouts.check_failures(
                int(metrics["rollout/failed_rows"]),
                int(self.accelerator.reduce(episodes, "sum")),
                [e.error or "" for e in batch.episodes if e.failed],
            )

    # -- advantages and masks -----------------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.args.layout == "step":
            return self._score_step_rows(inputs)
        out = super()._generate_and_score_completions(inputs)
        # TRL wrote rollout_func's extra columns into these dicts, row i's into inputs[i] (inp[key] = values[i]); each
        # is its own dict: TRL takes datasets.Dataset rows (a fresh dict per access) or repeats an IterableDataset's
        # records deep-copied (trl/trainer/utils.py repeat_iterable_dataset), so a task's samples never share one
        args = self.args
        rows = [x[ROW] for x in inputs]  # the rows TRL holds, in its order: the engine's Sample objects
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        device = out["completion_ids"].device
        process = args.process_reward_weight != 0.0
        adv, keep, rewards, valid = self._group_advantages(episode_rows(rows), group, device)
        completion = out["completion_mask"].float()
        agent = out["tool_mask"].float() * completion
        if process or not args.loss_mask:
            stats = A.process_stats(self._gather_process(rows)) if process else None
            credit = agent if args.advantage_mask else completion
            adv = A.token_advantages(
                adv.cpu(),
                credit.cpu(),
                [r.step_ends for r in rows],
                [r.step_process for r in rows],
                args.process_reward_weight,
                stats,
            ).to(device)
        loss_mask = (agent if args.loss_mask else completion) * self._row_mask(rows, keep).to(device).unsqueeze(1)
        out["advantages"] = adv.to(device)
        out["tool_mask"] = loss_mask.to(dtype=out["completion_mask"].dtype)
        if self.async_rollouts is not None and mode == "train":
            self._correct_staleness(out)
        # TRL's token-sum losses divide by this; it must count exactly the tokens in the loss, never padding
        out["num_items_in_batch"] = self.accelerator.gather((loss_mask * completion).sum()).sum()
        self._log_groups(mode, rewards, valid, group, keep)
        if self.skip_rows and mode == "train":
            out = self._drop_rows_without_gradient(out)
        return out

    def _correct_staleness(self, out: dict[str, Any]) -> None:
        """Rows sampled by an older policy: advantages times the truncated importance weight of the current policy
        (before this update) against the sampling one, per agent token (:func:`async_rollouts.truncated_is_weights`);
        the current log-probs are also the loss's ``old_per_token_logps`` (decoupled PPO's proximal policy)."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            current = self._get_per_token_logps_and_entropies(
                self.model, ids, attn, out["completion_ids"].size(1), batch_size=self.args.per_device_train_batch_size
            )[0]
        mask = out["tool_mask"] * out["completion_mask"]
        weights, stats = AR.truncated_is_weights(
            current, out["sampling_per_token_logps"], mask, self.args.staleness_is_cap
        )
        out["advantages"] = AR.corrected_advantages(out["advantages"], weights)
        out["old_per_token_logps"] = current
        for key, value in stats.items():
            self._metrics["train"][key].append(value)

    def _group_advantages(
        self, episodes: Sequence[Sequence[Sample]], group: int, device: Any
    ) -> tuple[torch.Tensor, ...]:
        """Each local episode's advantage and keep flag (:func:`advantages.group_advantages`) from the rows of each
        episode (:func:`agentgym_r1.adapters.records.episode_rows`), group statistics over the episodes of every
        process; also the global outcome rewards and valid flags, for the group metrics. The outcome is the episode's
        reward less its process parts when those are credited per step (never twice)."""
        args = self.args
        process = args.process_reward_weight != 0.0
        outcome = [
            rows[0].reward - (sum(p for r in rows for p in r.step_process) if process else 0.0) for rows in episodes
        ]
        rewards, failed = self._gather([outcome, [float(rows[0].failed) for rows in episodes]], device)
        valid = ~failed.bool()
        part = slice(
            self.accelerator.process_index * len(episodes), (self.accelerator.process_index + 1) * len(episodes)
        )
        scale = args.scale_rewards if args.scale_rewards in ("group", "batch") else "none"
        adv, keep = A.group_advantages(rewards, valid, group, args.advantage_estimator, scale, args.keep_ratio)
        return adv[part], keep[part], rewards, valid

    # -- the step layout: one row per turn ----------------------------------------------------------------------------
    def _score_step_rows(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Agent-R1's step-level MDP on TRL's loss: a row per turn (prompt: the context the model saw that turn;
        completion: what it sampled), every row of an episode carrying the episode's advantage (plus its own step's
        process credit), group statistics over episodes, ``num_items_in_batch`` over the trained tokens of every
        process. TRL's ``_generate_and_score_completions`` assumes one row per prompt, so this builds its output
        (the keys ``_compute_loss`` reads) itself; the row count is padded with fully masked rows to the count of
        :meth:`_rows_on_every_process` (episodes have different numbers of turns on each process)."""
        args, device = self.args, self.accelerator.device
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        batch = self._play([x["prompt"] for x in inputs])
        episodes = batch.episode_rows()
        adv_ep, keep, rewards, valid = self._group_advantages(episodes, group, device)
        index = {rows[0].episode_id: i for i, rows in enumerate(episodes)}
        rows = [r for r in batch.samples if not r.failed] or batch.samples[:1]
        stats = A.process_stats(self._gather_process(rows)) if args.process_reward_weight else (0.0, 0.0)
        adv, train = [], []
        for r in rows:
            i = index[r.episode_id]
            credit = (r.step_process[0] - stats[0]) / (stats[1] + A.EPS) if stats[1] > A.EPS else 0.0
            adv.append(float(adv_ep[i]) + args.process_reward_weight * credit)
            train.append(float(keep[i]) * float(not r.failed))
        extra = self._rows_on_every_process(len(rows)) - len(rows)
        filler = self.rollouts.chat.pad_token_id
        fill = Sample([filler], [filler], [0.0], [0], [0], [0.0], 0.0, {}, False, "", 0, failed=True)
        t = row_tensors(rows + [fill] * extra, filler, device)
        out = {key: t[key] for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
        trained = torch.tensor([int(x) for x in train] + [0] * extra, dtype=torch.long, device=device)
        out["tool_mask"] = t["env_mask"] * trained.unsqueeze(1)
        out["advantages"] = torch.tensor(adv + [0.0] * extra, device=device)
        out["num_items_in_batch"] = self.accelerator.gather((out["tool_mask"] * out["completion_mask"]).sum()).sum()
        self._reference_logps(out, mode)
        self._log_groups(mode, rewards, valid, group, keep)
        if self.skip_rows and mode == "train":
            out = self._drop_rows_without_gradient(out)
        return out

    def _reference_logps(self, out: dict[str, Any], mode: str) -> None:
        """``old_per_token_logps`` (when generation and optimizer steps are misaligned) and the reference model's
        log-probabilities (``beta != 0``), as TRL's ``_generate_and_score_completions`` computes them."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        keep = out["completion_ids"].size(1)
        size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        with torch.no_grad():
            if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations):
                out["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.model, ids, attn, keep, batch_size=size
                )[0]
            if self.beta != 0.0:
                model = self.ref_model if self.ref_model is not None else self.model
                # with LoRA TRL keeps no ref_model: the reference is the base, the adapter disabled (as TRL does)
                with base_model_context(self.accelerator.unwrap_model(model)):
                    out["ref_per_token_logps"] = self._get_per_token_logps_and_entropies(
                        model, ids, attn, keep, batch_size=size
                    )[0]

    def _gather(self, columns: list[list[float]], device: Any) -> torch.Tensor:
        return self.accelerator.gather(torch.tensor(columns, dtype=torch.float32, device=device).T).T.cpu()

    def _gather_process(self, rows: Sequence[Any]) -> list[float]:
        from accelerate.utils import gather_object

        return gather_object([p for r in rows if not r.failed for p in r.step_process])

    def _row_mask(self, rows: Sequence[Any], keep: torch.Tensor) -> torch.Tensor:
        """1 for rows that train: kept by StarPO-S, not failed, and (with ``mask_truncated_completions``) not cut by
        the completion budget."""
        mask = keep.clone()
        if self.args.mask_truncated_completions:
            mask &= torch.tensor([r.end_reason != "context_limit" for r in rows])
        return mask.float()

    def _drop_rows_without_gradient(self, out: dict[str, Any]) -> dict[str, Any]:
        """Keep only rows with a nonzero advantage on a trained token. Exact for the losses :meth:`_resolve_skip_
        zero_advantage` allows: the others add exactly zero and ``num_items_in_batch`` still counts every trained
        token. The number of rows kept is :meth:`_rows_on_every_process` of the useful ones (padded with dropped
        rows), so every process keeps as many rows as the others."""
        adv = out["advantages"]
        useful = ((adv.unsqueeze(1) if adv.dim() == 1 else adv) * out["tool_mask"]).abs().sum(dim=1) > 0
        rows = useful.numel()  # the same on every process (TRL's batch split; the step layout's padding)
        n_keep = min(rows, self._rows_on_every_process(int(useful.sum())))
        self._metrics["train"]["rollout/trained_rows"].append(n_keep / rows)
        if n_keep == rows:
            return out
        order = torch.argsort(useful.int(), descending=True, stable=True)[:n_keep].sort().values
        return {
            key: value[order] if isinstance(value, torch.Tensor) and value.dim() > 0 and len(value) == rows else value
            for key, value in out.items()
        }

    def _rows_on_every_process(self, rows: int) -> int:
        """The row count every process trains this step: the largest of the processes' ``rows``, rounded up to a
        multiple of ``steps_per_generation`` (TRL's ``split_tensor_dict`` splits a process's rows into that many
        micro-batches). Every process must hold as many rows: TRL 1.16's ``GRPOTrainer._compute_loss`` gathers
        per-row tensors (``clip_ratio/low_min``: ``accelerator.gather(masked_seq_mean(...))``), and gloo's and
        NCCL's all-gather need one shape on every process (a mismatch aborts the run or hangs it)."""
        split = self.args.steps_per_generation
        local = torch.tensor([-(-max(rows, 1) // split) * split], device=self.accelerator.device)
        return int(self.accelerator.gather(local).max())

    def _log_groups(
        self, mode: str, rewards: torch.Tensor, valid: torch.Tensor, group: int, keep: torch.Tensor
    ) -> None:
        """In-group reward spread over the global batch (valid rows only) and the share of groups kept."""
        g = rewards.view(-1, group)
        v = valid.view(-1, group)
        spreads = [g[i][v[i]].std().item() for i in range(g.shape[0]) if int(v[i].sum()) > 1]
        self._metrics[mode]["rollout/group_reward_std"].append(sum(spreads) / len(spreads) if spreads else 0.0)
        kept = self.accelerator.gather(keep.float().to(self.accelerator.device)).mean().item()
        self._metrics[mode]["rollout/kept_groups"].append(kept)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        values = self._metrics[mode].get("rollout/group_reward_std")
        if values:
            logs.setdefault("rollout/group_reward_std", sum(values) / len(values))
        if "loss" in logs:
            logs["loss/total"] = logs["loss"]
        for key in ("entropy", "grad_norm", "clip_ratio/region_mean"):
            if key in logs:
                logs[f"loss/{key.split('/')[0]}"] = logs[key]
        self.echo_trap.update({**logs, **{k: sum(v) / len(v) for k, v in self._metrics[mode].items() if v}})
        super().log(logs, start_time)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentgym_r1.trainers.grpo --config run.yaml [--flag value ...]``."""
    from agentgym_r1.trainers.cli import main_for

    main_for(AgentGRPOConfig, AgentGRPOTrainer, argv)


if __name__ == "__main__":
    main()
