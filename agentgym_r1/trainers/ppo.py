"""Multi-turn PPO with a critic, on transformers' ``Trainer`` (so Accelerate, DeepSpeed or FSDP run it at scale).

TRL 1.16 has no PPOTrainer, so this is one: each ``Trainer`` step plays ``rollout_batch_size`` episodes with the
rollout engine, scores every completion token with the frozen-for-the-step policy and the critic, and runs
``ppo_epochs`` passes of clipped policy and value updates over minibatches. Advantages come from GAE over agent
tokens only (``level="token"``: environment tokens are skipped, the value at the next agent token bootstraps) or over
steps (``level="step"``: one value per turn, taken before the turn's first token; the step's advantage is shared by
its tokens), as in Agent-R1. The critic is a copy of the policy's backbone with a scalar head.

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

from agentgym_r1.trainers import advantages as A
from agentgym_r1.trainers.configs import AgentPPOConfig
from agentgym_r1.trainers.grpo import make_env_factory, rollout_metrics, task_dataset
from agentgym_r1.trainers.rollout import Episode, play


class PolicyWithCritic(nn.Module):
    """The policy (a causal LM) and a critic (a copy of its backbone with a scalar value head)."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.policy = policy
        self.critic = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder") else policy.model)
        self.value_head = nn.Linear(policy.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        self.config = policy.config

    def values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.critic(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.value_head(hidden).squeeze(-1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self.policy(input_ids=input_ids, attention_mask=attention_mask)


def batch_tensors(episodes: Sequence[Episode], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-padded prompts and right-padded completions, TRL's layout; masks over the completion positions."""
    P = max(len(e.prompt_ids) for e in episodes)
    T = max(1, max(len(e.completion_ids) for e in episodes))
    B = len(episodes)
    ids = torch.full((B, P + T), pad_id)
    attn = torch.zeros((B, P + T), dtype=torch.long)
    agent = torch.zeros((B, T))
    valid = torch.zeros((B, T))
    for b, e in enumerate(episodes):
        p, c = len(e.prompt_ids), len(e.completion_ids)
        ids[b, P - p : P] = torch.tensor(e.prompt_ids)
        ids[b, P : P + c] = torch.tensor(e.completion_ids, dtype=torch.long)
        attn[b, P - p : P + c] = 1
        agent[b, :c] = torch.tensor(e.env_mask, dtype=torch.float32)
        valid[b, :c] = 1.0
    return {"input_ids": ids, "attention_mask": attn, "agent": agent, "valid": valid,
            "prompt_len": torch.tensor(P)}


def token_logps(model: PolicyWithCritic, batch: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
    P = int(batch["prompt_len"])
    logits = model(batch["input_ids"], batch["attention_mask"]).logits[:, P - 1 : -1].float() / temperature
    return logits.log_softmax(-1).gather(-1, batch["input_ids"][:, P:].unsqueeze(-1)).squeeze(-1)


def token_values(model: PolicyWithCritic, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    P = int(batch["prompt_len"])
    return model.values(batch["input_ids"], batch["attention_mask"])[:, P - 1 : -1].float()


class AgentPPOTrainer(Trainer):
    """Multi-turn PPO; see the module docstring. ``model`` is the policy (a causal LM)."""

    def __init__(self, model: Any, args: AgentPPOConfig, processing_class: Any, train_dataset: Any = None,
                 make_env: Callable[[], gym.Env] | None = None, **kwargs: Any) -> None:
        args.per_device_train_batch_size = args.rollout_batch_size
        args.remove_unused_columns = False
        self.make_env = make_env or make_env_factory(args.env_id, args.env_kwargs)
        self._metrics: dict[str, list[float]] = defaultdict(list)
        model = model if isinstance(model, PolicyWithCritic) else PolicyWithCritic(model)
        super().__init__(model=model, args=args, processing_class=processing_class,
                         train_dataset=train_dataset if train_dataset is not None else task_dataset(args.num_tasks),
                         data_collator=lambda rows: {"resets": [json.loads(r["prompt"]) for r in rows]}, **kwargs)

    def create_optimizer(self, model: Any = None) -> Any:
        if self.optimizer is None:
            m = self.model
            critic = [*m.critic.parameters(), *m.value_head.parameters()]
            self.optimizer = torch.optim.AdamW(
                [{"params": list(m.policy.parameters()), "lr": self.args.learning_rate},
                 {"params": critic, "lr": self.args.critic_learning_rate or self.args.learning_rate}],
                weight_decay=self.args.weight_decay)
        return self.optimizer

    # -- one PPO iteration per Trainer step ---------------------------------------------------------------------------
    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        args = self.args
        unwrapped = self.accelerator.unwrap_model(model)
        episodes = play(unwrapped.policy, self.processing_class, self.make_env, inputs["resets"],
                        max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                        max_completion_tokens=args.max_completion_length, temperature=args.temperature)
        batch = self._score(unwrapped, episodes)
        for key, value in rollout_metrics(args.env_id, episodes).items():
            self._metrics[key].append(value)
        model.train()
        order = torch.randperm(len(episodes))
        chunks = [order[i : i + args.mini_batch_size] for i in range(0, len(episodes), args.mini_batch_size)]
        updates = [c for _ in range(args.ppo_epochs) for c in chunks]
        for k, idx in enumerate(updates):
            loss = self._minibatch_loss(model, {key: v[idx] if v.dim() else v for key, v in batch.items()})
            self.accelerator.backward(loss)
            if k < len(updates) - 1:  # the Trainer clips and steps after the last one
                if args.max_grad_norm:
                    self.accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad()
        return loss.detach()

    @torch.no_grad()
    def _score(self, model: PolicyWithCritic, episodes: list[Episode]) -> dict[str, torch.Tensor]:
        args, device = self.args, self.accelerator.device
        batch = {k: v.to(device) for k, v in batch_tensors(episodes, self.processing_class.pad_token_id).items()}
        model.eval()
        batch["old_logps"] = token_logps(model, batch, args.temperature)
        values = token_values(model, batch)
        credit = batch["agent"] if args.advantage_mask else batch["valid"]
        if args.level == "token":
            rewards = A.place_step_rewards(tuple(values.shape), [e.step_ends for e in episodes],
                                           [e.step_rewards for e in episodes]).to(device)
            adv, ret = A.gae(rewards.cpu(), values.cpu(), credit.cpu(), args.gamma, args.lam)
            value_mask = credit
        else:
            adv, ret, value_mask = self._step_targets(episodes, values)
        adv, ret = adv.to(device), ret.to(device)
        batch["advantages"] = A.masked_whiten(adv, credit)
        batch["returns"], batch["old_values"], batch["value_mask"] = ret, values, value_mask.to(device)
        batch["loss_mask"] = batch["agent"] if args.loss_mask else batch["valid"]
        return batch

    def _step_targets(self, episodes: list[Episode], values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Step-level GAE: a value per turn (before its first token); the step's advantage on its agent tokens."""
        starts = [[s for s, _ in A.step_token_ranges(e.step_ends)] for e in episodes]
        ranges = [A.step_token_ranges(e.step_ends) for e in episodes]
        step_values = [[values[b, s].item() for s in ss] for b, ss in enumerate(starts)]
        step_adv, step_ret = A.step_gae([e.step_rewards for e in episodes], step_values, self.args.gamma,
                                        self.args.lam)
        adv, ret, vmask = (torch.zeros_like(values).cpu() for _ in range(3))
        for b, e in enumerate(episodes):
            agent = torch.tensor(e.env_mask, dtype=torch.float32)
            for k, (s, end) in enumerate(ranges[b]):
                adv[b, s:end] = step_adv[b][k] * agent[s:end]
                ret[b, s], vmask[b, s] = step_ret[b][k], 1.0
        return adv, ret, vmask

    def _minibatch_loss(self, model: Any, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        args = self.args
        logps = token_logps(model, mb, args.temperature)
        values = token_values(self.accelerator.unwrap_model(model), mb)
        pg, clipfrac = A.clipped_policy_loss(logps, mb["old_logps"], mb["advantages"], mb["loss_mask"], args.clip_range)
        vf = A.clipped_value_loss(values, mb["old_values"], mb["returns"], mb["value_mask"], args.value_clip_range)
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

    # -- checkpoints: the policy as a normal model directory, the critic beside it ------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
        output_dir = output_dir or self.args.output_dir
        model = self.accelerator.unwrap_model(self.model)
        model.policy.save_pretrained(output_dir)
        torch.save({"critic": model.critic.state_dict(), "value_head": model.value_head.state_dict()},
                   os.path.join(output_dir, "critic.pt"))
        if self.processing_class is not None:
            self.processing_class.save_pretrained(output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        from transformers import AutoModelForCausalLM

        model = self.accelerator.unwrap_model(model or self.model)
        policy = AutoModelForCausalLM.from_pretrained(resume_from_checkpoint)
        model.policy.load_state_dict(policy.state_dict())
        critic = torch.load(os.path.join(resume_from_checkpoint, "critic.pt"), weights_only=True)
        model.critic.load_state_dict(critic["critic"])
        model.value_head.load_state_dict(critic["value_head"])


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentgym_r1.trainers.ppo --config run.yaml [--flag value ...]``."""
    from agentgym_r1.trainers.grpo import run_from_argv

    run_from_argv(AgentPPOConfig, AgentPPOTrainer, argv)


if __name__ == "__main__":
    main()
