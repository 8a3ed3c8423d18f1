"""Multi-turn PPO with a critic, on transformers' ``Trainer`` (so Accelerate, DeepSpeed or FSDP run it at scale).

TRL 1.16 has no PPOTrainer, so this is one: each ``Trainer`` step plays ``rollout_batch_size`` episodes per process
with the trainer's rollout engine, scores every completion token with the frozen-for-the-step policy and the critic
(minibatch by minibatch, log-probabilities through TRL's ``selective_log_softmax``, so no full-vocabulary fp32
tensor of the whole rollout is ever built), and runs ``ppo_epochs`` passes of clipped policy and value updates over
minibatches. Advantages come from GAE over agent tokens only (``level="token"``: environment tokens are skipped, the
value at the next agent token bootstraps) or over steps (``level="step"``: one value per turn, read at the turn's
first agent token, i.e. after the env reply it answers; the step's advantage is shared by its tokens), as in
Agent-R1. The critic is a copy of the policy's backbone with a scalar head, in the policy's dtype.

With ``use_peft`` (LoRA) the policy trains an adapter on its frozen base, and the critic is its own frozen copy of
the base's backbone with an adapter of its own (same rank and targets) and its value head: the policy loss moves
only the policy's adapter, the value loss only the critic's adapter and head, and neither base changes (tested).
The critic's copy of the base costs memory (no optimizer state); an adapter of the critic on the policy's own base
would save it, but peft trains one active adapter per forward, and one forward must run both here (DDP).

One forward of :class:`PolicyWithCritic` runs policy and critic together, so DDP sees every parameter used. Losses
and advantage whitening are normalised by token counts over every process, so 2 processes with half the episodes
each take the same update as 1 with all of them. Failed rows (placeholders, env or generation errors) are left out
of the whitening and the losses and counted in ``rollout/failed_rows``.

Run: ``python -m agentgym_r1.trainers.ppo --config run.yaml`` or ``agentgym-r1 train ppo --config run.yaml``.
"""

from __future__ import annotations

import copy
import json
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn
from transformers import Trainer

from agentgym_r1.adapters import RolloutBatch
from agentgym_r1.trainers import advantages as A
from agentgym_r1.trainers import lora
from agentgym_r1.trainers.common import (
    Rollouts,
    check_env_builds,
    check_processes,
    gathered_rollout_metrics,
    task_dataset,
)
from agentgym_r1.trainers.guards import FiniteGuard
from agentgym_r1.trainers.ppo_config import AgentPPOConfig


class PolicyWithCritic(nn.Module):
    """The policy (a causal LM) and a critic (a copy of its backbone with a scalar value head, same dtype).

    ``forward`` returns ``(logits, values)`` for the last ``keep`` positions, both from one call, so a DDP wrapper
    sees the critic's parameters used in the same forward as the policy's."""

    def __init__(self, policy: Any, peft_config: Any = None, autocast_adapter_dtype: bool = True) -> None:
        super().__init__()
        critic = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder") else policy.model)
        if peft_config is not None:  # LoRA: an adapter each, on frozen bases (module docstring)
            policy, critic = lora.adapt_policy_and_critic(
                policy, critic, peft_config, autocast_adapter_dtype=autocast_adapter_dtype
            )
        self.policy, self.critic = policy, critic
        dtype = next(policy.parameters()).dtype
        self.value_head = nn.Linear(policy.config.hidden_size, 1, dtype=dtype)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        self.config = policy.config

    # gradient checkpointing acts on policy and critic together (Trainer and TRL's unwrap_model_for_generation call
    # these on the model they are given)
    @property
    def is_gradient_checkpointing(self) -> bool:
        return bool(getattr(self.policy, "is_gradient_checkpointing", False))

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        for m in (self.policy, self.critic):
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)
            if lora.is_peft_model(m):  # a frozen base: checkpointed blocks need inputs that require grad (as TRL 1.16
                m.enable_input_require_grads()  # GRPOTrainer.__init__ does for PEFT, transformers#42489)

    def gradient_checkpointing_disable(self) -> None:
        for m in (self.policy, self.critic):
            m.gradient_checkpointing_disable()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int = 0) -> tuple[Any, Any]:
        logits = self.policy(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits
        hidden = self.critic(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        values = self.value_head(hidden[:, -keep:] if keep else hidden).squeeze(-1)
        return logits, values


def score(
    model: Any, ids: torch.Tensor, attn: torch.Tensor, completion: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per completion token: the policy's log-probability of the token and the critic's value before it.
    ``ids``/``attn`` are the whole rows (prompt left-padded, completion right-padded); ``completion`` its ids."""
    from trl.trainer.utils import selective_log_softmax

    t = completion.shape[1]
    logits, values = model(ids, attn, keep=t + 1)
    logps = selective_log_softmax(logits[:, :-1].float() / temperature, completion)
    return logps, values[:, :-1].float()


class AgentPPOTrainer(Trainer):
    """Multi-turn PPO; see the module docstring. ``model`` is the policy (a causal LM). ``make_env`` and
    ``backend`` replace the env and the generation as in :class:`agentgym_r1.trainers.grpo.AgentGRPOTrainer`."""

    def __init__(
        self,
        model: Any,
        args: AgentPPOConfig,
        processing_class: Any,
        train_dataset: Any = None,
        make_env: Callable[[], gym.Env] | None = None,
        backend: Any = None,
        **kwargs: Any,
    ) -> None:
        if make_env is None:
            check_env_builds(args.env_id, args.env_kwargs)
        self.rollouts = Rollouts(args, processing_class, make_env, backend)
        self._metrics: dict[str, list[float]] = defaultdict(list)
        if not isinstance(model, PolicyWithCritic):
            keep = lora.adapter_keeps_base_dtype(args)  # ZeRO-3: adapters in the base's dtype
            model = PolicyWithCritic(model, lora.trainer_peft_config(args, model), autocast_adapter_dtype=not keep)
        super().__init__(
            model=model,
            args=args,
            processing_class=processing_class,
            train_dataset=train_dataset if train_dataset is not None else task_dataset(args.num_tasks),
            data_collator=lambda rows: {"resets": [json.loads(r["prompt"]) for r in rows]},
            **kwargs,
        )
        check_processes(self.accelerator)
        self.add_callback(FiniteGuard(self.accelerator))  # NaN weights stop the run, never get saved
        self.llm = None
        if args.use_vllm:
            from agentgym_r1.trainers.vllm import colocated_engine

            self.llm = colocated_engine(model.policy, args, self.accelerator.num_processes)

    def create_optimizer(self, model: Any = None) -> Any:
        """The optimizer ``args.optim`` names (transformers' own choice of class and kwargs), with the critic in a
        parameter group of its own at ``critic_learning_rate``."""
        if self.optimizer is None:
            m = self.model
            cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, m)
            kwargs = {k: v for k, v in kwargs.items() if k != "lr"}
            critic = [p for p in (*m.critic.parameters(), *m.value_head.parameters()) if p.requires_grad]
            decay = {"weight_decay": self.args.weight_decay}
            self.optimizer = cls(
                [
                    {
                        "params": [p for p in m.policy.parameters() if p.requires_grad],
                        "lr": self.args.learning_rate,
                        **decay,
                    },
                    {"params": critic, "lr": self.args.critic_learning_rate or self.args.learning_rate, **decay},
                ],
                lr=self.args.learning_rate,
                **kwargs,
            )
        return self.optimizer

    # -- one PPO iteration per Trainer step ---------------------------------------------------------------------------
    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        args = self.args
        if self.llm is not None:
            from agentgym_r1.adapters.backends.vllm import VLLMBackend
            from agentgym_r1.trainers.vllm import sync_colocated_weights

            policy = self.accelerator.unwrap_model(model).policy
            sync_colocated_weights(self.llm, lora.merged_parameters(policy))  # with LoRA: the adapter's update added
            batch = self.rollouts.play(VLLMBackend(self.rollouts.chat, llm=self.llm), inputs["resets"])
        else:
            with self.rollouts.policy_backend(self.model_wrapped, self.accelerator, select=lambda m: m.policy) as b:
                batch = self.rollouts.play(b, inputs["resets"])
        metrics = gathered_rollout_metrics(args.env_id, batch, self.accelerator)
        self.rollouts.check_failures(
            int(metrics["rollout/failed_rows"]),
            int(self.accelerator.reduce(torch.tensor(len(batch.samples), device=self.accelerator.device))),
            [e.error or "" for e in batch.episodes if e.failed],
        )
        for key, value in metrics.items():
            self._metrics[key].append(value)
        data = self._score(model, batch)
        model.train()
        n = len(batch.samples)
        order = torch.randperm(n)
        chunks = [order[i : i + args.mini_batch_size] for i in range(0, n, args.mini_batch_size)]
        updates = [c for _ in range(args.ppo_epochs) for c in chunks]
        for k, idx in enumerate(updates):
            with self.compute_loss_context_manager():
                loss = self._minibatch_loss(model, {key: v[idx] for key, v in data.items()})
            self.accelerator.backward(loss)
            if k < len(updates) - 1:  # the Trainer clips and steps after the last one
                if args.max_grad_norm:
                    self.accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad()
        return loss.detach()

    @torch.no_grad()
    def _score(self, model: Any, batch: RolloutBatch) -> dict[str, torch.Tensor]:
        args, device = self.args, self.accelerator.device
        t = batch.to_tensors(self.processing_class.pad_token_id, device)
        ids = torch.cat([t["prompt_ids"], t["completion_ids"]], dim=1)
        attn = torch.cat([t["prompt_mask"], t["completion_mask"]], dim=1)
        completion = t["completion_mask"].float()
        ok = torch.tensor([not s.failed for s in batch.samples], device=device, dtype=torch.float32).unsqueeze(1)
        agent = t["env_mask"].float() * completion * ok
        unwrapped = self.accelerator.unwrap_model(model)
        unwrapped.eval()
        logps, values = [], []
        for i in range(0, ids.shape[0], args.mini_batch_size):
            with self.compute_loss_context_manager():
                lp, v = score(
                    unwrapped,
                    ids[i : i + args.mini_batch_size],
                    attn[i : i + args.mini_batch_size],
                    t["completion_ids"][i : i + args.mini_batch_size],
                    args.temperature,
                )
            logps.append(lp)
            values.append(v)
        old_logps, old_values = torch.cat(logps), torch.cat(values)
        credit = agent if args.advantage_mask else completion * ok
        if args.level == "token":
            adv, ret = A.gae(t["step_rewards"].cpu(), old_values.cpu(), credit.cpu(), args.gamma, args.lam)
            value_mask = credit
        else:
            rows = batch.samples
            adv, ret, value_mask = A.step_targets(
                [r.step_ends for r in rows], [r.step_rewards for r in rows], old_values, agent, args.gamma, args.lam
            )
        adv, ret, value_mask = adv.to(device), ret.to(device), value_mask.to(device) * ok
        return {
            "input_ids": ids,
            "attention_mask": attn,
            "completion_ids": t["completion_ids"],
            "old_logps": old_logps,
            "old_values": old_values,
            "returns": ret,
            "value_mask": value_mask,
            "advantages": self._whiten(adv, credit),
            "loss_mask": (agent if args.loss_mask else completion * ok),
        }

    def _whiten(self, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(adv - mean) / std`` over the masked tokens of every process (sums gathered)."""
        stats = torch.stack([(adv * mask).sum(), (adv * adv * mask).sum(), mask.sum()]).double()
        total, sq, n = self.accelerator.reduce(stats, reduction="sum").tolist()
        mean = total / max(n, 1.0)
        var = max(sq / max(n, 1.0) - mean * mean, 0.0)
        return (adv - mean) / (var**0.5 + A.EPS) * mask

    def _minibatch_loss(self, model: Any, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Clipped policy and value losses, each a sum over this process's tokens divided by the per-process share
        of the tokens of every process (DDP averages gradients over processes, which makes it a global mean)."""
        args, world = self.args, self.accelerator.num_processes
        logps, values = score(model, mb["input_ids"], mb["attention_mask"], mb["completion_ids"], args.temperature)
        counts = self.accelerator.reduce(torch.stack([mb["loss_mask"].sum(), mb["value_mask"].sum()]), "sum")
        pg_n, vf_n = (c.clamp(min=1.0) / world for c in counts)
        pg, clipfrac = A.clipped_policy_loss(
            logps, mb["old_logps"], mb["advantages"], mb["loss_mask"], args.clip_range, denominator=pg_n
        )
        vf = A.clipped_value_loss(
            values, mb["old_values"], mb["returns"], mb["value_mask"], args.value_clip_range, denominator=vf_n
        )
        self._metrics["loss/policy"].append(pg.item())
        self._metrics["loss/value"].append(vf.item())
        self._metrics["loss/clip_fraction"].append(clipfrac.item())
        return pg + args.value_coef * vf

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        logs.update({k: sum(v) / len(v) for k, v in self._metrics.items() if v})
        if "loss" in logs:
            logs["loss/total"] = logs["loss"]
        self._metrics.clear()
        super().log(logs, start_time)

    # -- checkpoints: the policy as a normal model directory (LoRA: its adapter), the critic beside it -----------------
    def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
        """``state_dict``: the full weights of policy and critic when the Trainer gathered them from shards (FSDP's
        ``FULL_STATE_DICT``, ZeRO-3's consolidated weights: ``Trainer.save_model`` gathers on every process, then calls
        this on every process: only the main one writes, touching no shard); the unwrapped model's own weights
        otherwise."""
        if not self.args.should_save:  # transformers 5.24 calls _save on every process under FSDP (save_model)
            return
        output_dir = output_dir or self.args.output_dir
        model = self.accelerator.unwrap_model(self.model)
        if state_dict:  # saved from a plain copy: the policy's own save_pretrained would touch its shards here
            from agentgym_r1.trainers.sharding import plain_copy

            parts = {
                name: {k.removeprefix(f"{name}."): v for k, v in state_dict.items() if k.startswith(f"{name}.")}
                for name in ("policy", "critic", "value_head")
            }
            plain_copy(model.policy, parts["policy"]).save_pretrained(output_dir)
        else:
            # an adapted critic: its adapter only (the frozen base is model_init's)
            parts = {"critic": lora.trainable_state(model.critic), "value_head": model.value_head.state_dict()}
            model.policy.save_pretrained(output_dir)
        torch.save(
            {"critic": parts["critic"], "value_head": parts["value_head"]}, os.path.join(output_dir, "critic.pt")
        )
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        from transformers import AutoModelForCausalLM

        model = self.accelerator.unwrap_model(model or self.model)
        critic = torch.load(os.path.join(resume_from_checkpoint, "critic.pt"), weights_only=True)
        if lora.is_peft_model(model.policy):  # the adapters only; the frozen bases are model_init's
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            adapter = load_file(os.path.join(resume_from_checkpoint, "adapter_model.safetensors"))
            set_peft_model_state_dict(model.policy, adapter)
            model.critic.load_state_dict(critic["critic"], strict=False)
        else:
            policy = AutoModelForCausalLM.from_pretrained(resume_from_checkpoint, dtype=next(model.parameters()).dtype)
            model.policy.load_state_dict(policy.state_dict())
            model.critic.load_state_dict(critic["critic"])
        model.value_head.load_state_dict(critic["value_head"])


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentgym_r1.trainers.ppo --config run.yaml [--flag value ...]``."""
    from agentgym_r1.trainers.cli import main_for

    main_for(AgentPPOConfig, AgentPPOTrainer, argv)


if __name__ == "__main__":
    main()
