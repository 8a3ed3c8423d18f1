"""Multi-turn GRPO (and RLOO, REINFORCE++) on TRL's ``GRPOTrainer``, driven by env rollouts through ``rollout_func``.

TRL generates nothing here: ``rollout_func`` plays each prompt's episodes with the trainer's rollout engine and
returns the engine's rows (``RolloutBatch.to_trl()``: prompt and completion ids, sampled logprobs, ``env_mask``),
which TRL uses as its tool mask. :class:`AgentGRPOTrainer` then replaces TRL's advantages with ours, computed over
the *global* batch (every process), as TRL computes its own: the chosen estimator over episode rewards, process
rewards credited to their step's tokens, StarPO-S group filtering, the ``loss_mask`` / ``advantage_mask`` switches
of the Agent-R1 ablation, and rows whose episode failed left out of group statistics and the loss.

Generation goes through the policy (transformers ``generate`` on the model unwrapped with TRL's
``unwrap_model_for_generation``) or, with ``use_vllm: true``, through the vLLM engine TRL built and synced.

Run: ``python -m agentgym_r1.trainers.grpo --config run.yaml`` or ``agentgym-r1 train grpo --config run.yaml``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from trl import GRPOTrainer

from agentgym_r1.adapters import RolloutBatch
from agentgym_r1.trainers import advantages as A
from agentgym_r1.trainers.common import Rollouts, check_env_builds, gathered_rollout_metrics, task_dataset
from agentgym_r1.trainers.configs import AgentGRPOConfig
from agentgym_r1.trainers.signals import EchoTrapMonitor


def episode_reward(prompts: list[Any], completions: list[Any], env_reward: list[float], failed: list[bool],
                   **_: Any) -> list[float | None]:
    """The env's summed reward of each episode (``rollout_func`` passes it through); ``None`` for a failed row, which
    TRL then leaves out of its logged reward statistics."""
    return [None if f else float(r) for r, f in zip(env_reward, failed, strict=True)]


class AgentGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose completions are multi-turn env episodes; see the module docstring.

    ``make_env`` replaces ``gym.make(args.env_id, **args.env_kwargs)``; ``backend`` replaces generation (any token
    backend of :mod:`agentgym_r1.adapters.backends`, e.g. a replaying one for tests).
    """

    def __init__(self, model: Any, args: AgentGRPOConfig, processing_class: Any, train_dataset: Any = None,
                 make_env: Callable[[], gym.Env] | None = None, backend: Any = None, **kwargs: Any) -> None:
        if make_env is None:
            check_env_builds(args.env_id, args.env_kwargs)
        self.rollouts = Rollouts(args, processing_class, make_env, backend)
        self._batch: RolloutBatch | None = None
        self.echo_trap = EchoTrapMonitor(args.echo_trap_window, args.echo_trap_ratio)
        super().__init__(model=model, reward_funcs=[episode_reward], args=args,
                         train_dataset=train_dataset if train_dataset is not None else task_dataset(args.num_tasks),
                         processing_class=processing_class, rollout_func=self._rollout, **kwargs)
        # TRL would call a row truncated when it does not end in EOS; our turns end on </answer> or </tool_call>, so
        # we mask by the episode's end instead (see _loss_mask).
        self.mask_truncated_completions = False
        self.skip_rows = self._resolve_skip_zero_advantage()

    def _resolve_skip_zero_advantage(self) -> bool:
        """Row skipping is exact only where a row with no advantage adds nothing to the loss *and* no other row's
        term depends on it: token-sum losses normalised by ``num_items_in_batch`` (dapo, cispo, vespo; TRL's
        ``_compute_loss``), no KL term, no entropy bonus or entropy mask (computed over the micro-batch) and no
        router aux loss. The config refuses an explicit ``True`` elsewhere; here the model's aux loss is known."""
        wanted = self.args.skip_zero_advantage
        if self.aux_loss_enabled and wanted:
            from agentgym_r1.error import ConfigError

            raise ConfigError("skip_zero_advantage=True with a router aux loss: the aux loss is a mean over the "
                              "micro-batch, so dropping rows changes it. Set skip_zero_advantage=false.")
        return bool(self.args.skip_rows_exact and not self.aux_loss_enabled if wanted is None else wanted)

    # -- generation ---------------------------------------------------------------------------------------------------
    def _rollout(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        resets = [json.loads(p) for p in prompts]
        if self.args.use_vllm:
            from agentgym_r1.trainers.vllm import vllm_backend

            batch = self.rollouts.play(vllm_backend(self, self.rollouts.chat), resets)
        else:
            with self.rollouts.policy_backend(self.model_wrapped, self.accelerator,
                                              self.args.ds3_gather_for_generation) as backend:
                batch = self.rollouts.play(backend, resets)
        self._batch = batch
        return batch.to_trl()

    def _generate(self, prompts: list[Any]) -> Any:
        out = super()._generate(prompts)
        assert self._batch is not None
        mode = "train" if self.model.training else "eval"
        metrics = gathered_rollout_metrics(self.args.env_id, self._batch, self.accelerator)
        self._metrics[mode]["completions/clipped_ratio"][-1] = metrics.pop("completions/clipped_ratio")
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)
        failed = [s.failed for s in self._batch.samples]
        errors = [e.error or "" for e in self._batch.episodes if e.failed]
        if mode == "train":
            self.rollouts.check_failures(int(metrics["rollout/failed_rows"]),
                                         int(self.accelerator.reduce(torch.tensor(len(failed)), "sum")), errors)
        return out

    # -- advantages and masks -----------------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        args, batch = self.args, self._batch
        assert batch is not None
        rows = batch.samples
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        device = out["completion_ids"].device
        process = args.process_reward_weight != 0.0
        # the outcome signal: with per-step process credit, the process parts are credited per step, not twice
        outcome = [r.reward - (sum(r.step_process) if process else 0.0) for r in rows]
        rewards = self._gather([outcome], device)[0]
        valid = ~self._gather([[float(r.failed) for r in rows]], device)[0].bool()
        part = slice(self.accelerator.process_index * len(rows), (self.accelerator.process_index + 1) * len(rows))
        scale = args.scale_rewards if args.scale_rewards in ("group", "batch") else "none"
        adv = A.episode_advantages(rewards, group, args.advantage_estimator, scale=scale, valid=valid)[part]
        keep = A.filter_groups(rewards, group, args.keep_ratio, valid=valid)[part] & valid[part]
        completion = out["completion_mask"].float()
        agent = out["tool_mask"].float() * completion
        if process or not args.loss_mask:
            stats = A.process_stats(self._gather_process(rows)) if process else None
            credit = agent if args.advantage_mask else completion
            adv = A.token_advantages(adv.cpu(), credit.cpu(), [r.step_ends for r in rows],
                                     [r.step_process for r in rows], args.process_reward_weight, stats).to(device)
        loss_mask = (agent if args.loss_mask else completion) * self._row_mask(rows, keep).to(device).unsqueeze(1)
        out["advantages"] = adv.to(device)
        out["tool_mask"] = loss_mask.to(dtype=out["completion_mask"].dtype)
        # TRL's token-sum losses divide by this; it must count exactly the tokens in the loss, never padding
        out["num_items_in_batch"] = self.accelerator.gather((loss_mask * completion).sum()).sum()
        self._log_groups(mode, rewards, valid, group, keep)
        if self.skip_rows and mode == "train":
            out = self._drop_rows_without_gradient(out)
        return out

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
        token. The number of rows kept stays a multiple of ``steps_per_generation`` (padded with dropped rows)."""
        adv = out["advantages"]
        useful = ((adv.unsqueeze(1) if adv.dim() == 1 else adv) * out["tool_mask"]).abs().sum(dim=1) > 0
        rows, split = useful.numel(), self.args.steps_per_generation
        n_keep = min(rows, max(split, -(-int(useful.sum()) // split) * split))
        self._metrics["train"]["rollout/trained_rows"].append(n_keep / rows)
        if n_keep == rows:
            return out
        order = torch.argsort(useful.int(), descending=True, stable=True)[:n_keep].sort().values
        return {key: value[order] if isinstance(value, torch.Tensor) and value.dim() > 0 and len(value) == rows
                else value for key, value in out.items()}

    def _log_groups(self, mode: str, rewards: torch.Tensor, valid: torch.Tensor, group: int,
                    keep: torch.Tensor) -> None:
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
