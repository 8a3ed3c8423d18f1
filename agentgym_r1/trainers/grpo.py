"""Multi-turn GRPO (and RLOO, REINFORCE++) on TRL's ``GRPOTrainer``, driven by env rollouts through ``rollout_func``.

TRL generates nothing here: ``rollout_func`` plays each prompt's episodes in the env and returns ``prompt_ids``,
``completion_ids`` (agent turns and env replies, concatenated), ``logprobs`` and ``env_mask`` (1 on agent tokens),
which TRL uses as the loss mask. :class:`AgentGRPOTrainer` then replaces TRL's advantages with ours: the chosen
estimator over episode rewards, process rewards credited to their step's tokens, StarPO-S group filtering, and the
``loss_mask`` / ``advantage_mask`` switches of the Agent-R1 ablation. It logs ``env/<id>/success``,
``rollout/turns``, ``rollout/invalid_rate`` and ``loss/*``, and watches the Echo Trap signals.

Run: ``python -m agentgym_r1.trainers.grpo --config run.yaml`` or ``agentgym-r1 train grpo --config run.yaml``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from trl import GRPOTrainer

from agentgym_r1.trainers.advantages import episode_advantages, filter_groups, token_advantages
from agentgym_r1.trainers.configs import AgentGRPOConfig
from agentgym_r1.trainers.rollout import Episode, play
from agentgym_r1.trainers.signals import EchoTrapMonitor


def task_dataset(num_tasks: int, seed: int = 0) -> Any:
    """Training rows: each ``prompt`` is the JSON reset of one episode (the env draws the task from its seed)."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": json.dumps({"seed": seed * 1_000_003 + i})} for i in range(num_tasks)])


def episode_reward(prompts: list[Any], completions: list[Any], episode_reward: list[float], **_: Any) -> list[float]:
    """The env's summed reward of each episode (``rollout_func`` passes it through)."""
    return list(episode_reward)


def make_env_factory(env_id: str, env_kwargs: dict[str, Any]) -> Callable[[], gym.Env]:
    import agentgym_r1  # noqa: F401  (registers the ids)

    return lambda: gym.make(env_id, **env_kwargs)


def rollout_metrics(env_id: str, episodes: Sequence[Episode]) -> dict[str, float]:
    n = max(1, len(episodes))
    turns = sum(e.turns for e in episodes)
    return {f"env/{env_id}/success": sum(e.success for e in episodes) / n,
            "rollout/turns": turns / n,
            "rollout/invalid_rate": sum(e.invalid for e in episodes) / max(1, turns),
            "rollout/reward": sum(e.reward for e in episodes) / n}


class AgentGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose completions are multi-turn env episodes; see the module docstring."""

    def __init__(self, model: Any, args: AgentGRPOConfig, processing_class: Any, train_dataset: Any = None,
                 make_env: Callable[[], gym.Env] | None = None, **kwargs: Any) -> None:
        self.make_env = make_env or make_env_factory(args.env_id, args.env_kwargs)
        self._episodes: list[Episode] = []
        self.echo_trap = EchoTrapMonitor(args.echo_trap_window, args.echo_trap_ratio)
        super().__init__(model=model, reward_funcs=[episode_reward], args=args,
                         train_dataset=train_dataset if train_dataset is not None else task_dataset(args.num_tasks),
                         processing_class=processing_class, rollout_func=self._rollout, **kwargs)

    def _rollout(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        args = self.args
        model = self.accelerator.unwrap_model(self.model)
        episodes = play(model, self.processing_class, self.make_env, [json.loads(p) for p in prompts],
                        max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                        max_completion_tokens=args.max_completion_length, temperature=args.temperature)
        self._episodes = episodes
        return {"prompt_ids": [e.prompt_ids for e in episodes],
                "completion_ids": [e.completion_ids for e in episodes],
                "logprobs": [e.logprobs for e in episodes],
                "env_mask": [e.env_mask for e in episodes],
                "episode_reward": [e.reward for e in episodes]}

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        args, episodes = self.args, self._episodes
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        device = out["completion_ids"].device
        local = torch.tensor([e.reward for e in episodes], dtype=torch.float32, device=device)
        rewards = self.accelerator.gather(local).cpu()
        start = self.accelerator.process_index * len(episodes)
        part = slice(start, start + len(episodes))
        adv = episode_advantages(rewards, group, args.advantage_estimator, scale=args.scale_rewards != "none")[part]
        keep = filter_groups(rewards, group, args.keep_ratio)[part]
        agent = out.get("tool_mask", torch.ones_like(out["completion_mask"])).cpu().float()
        agent = agent * out["completion_mask"].cpu()
        if args.process_reward_weight or not args.advantage_mask:
            adv = token_advantages(adv, agent, [e.step_ends for e in episodes], [e.step_process for e in episodes],
                                   args.process_reward_weight, args.advantage_mask)
        loss_rows = keep.float().unsqueeze(1)
        loss_mask = (agent if args.loss_mask else torch.ones_like(agent)) * loss_rows
        out["advantages"] = adv.to(device)
        out["tool_mask"] = loss_mask.to(device=device, dtype=out["completion_mask"].dtype)
        out["num_items_in_batch"] = self.accelerator.gather(out["tool_mask"].sum()).sum()  # token-sum losses
        self._log_rollout(mode, episodes, rewards[part], group, keep)
        if args.skip_zero_advantage and args.beta == 0.0 and args.top_entropy_quantile == 1.0 and mode == "train":
            out = self._drop_rows_without_gradient(out)
        return out

    def _drop_rows_without_gradient(self, out: dict[str, Any]) -> dict[str, Any]:
        """Keep only rows with a nonzero advantage on a trained token (with ``beta=0`` the others add exactly zero
        to the gradient); ``num_items_in_batch`` still counts every row's tokens, so the loss and its gradient are
        unchanged while the forward and backward pass skip, typically, the 30-60% of rows in all-equal groups. The
        number of rows kept stays a multiple of ``steps_per_generation`` (padded with dropped rows) and >= it."""
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

    def _log_rollout(self, mode: str, episodes: list[Episode], rewards: torch.Tensor, group: int,
                     keep: torch.Tensor) -> None:
        metrics = rollout_metrics(self.args.env_id, episodes)
        spread = rewards.view(-1, group).std(dim=1) if group > 1 else torch.zeros(1)
        metrics["rollout/group_reward_std"] = spread.mean().item()
        metrics["rollout/kept_groups"] = keep.float().mean().item()
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        for key in ("rollout/group_reward_std",):
            values = self._metrics[mode].get(key)
            if values:
                logs.setdefault(key, sum(values) / len(values))
        if "loss" in logs:
            logs["loss/total"] = logs["loss"]
        for key in ("entropy", "grad_norm", "clip_ratio/region_mean"):
            if key in logs:
                logs[f"loss/{key.split('/')[0]}"] = logs[key]
        self.echo_trap.update({**logs, **{k: sum(v) / len(v) for k, v in self._metrics[mode].items() if v}})
        super().log(logs, start_time)


def build_model_and_tokenizer(model_init: str | None) -> tuple[Any, Any]:
    """Load a local model directory (tokenizer inside), or build the tiny one for smoke runs."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.error import ConfigError

    if not model_init:
        raise ConfigError("set model_init to a local model directory (with its tokenizer), e.g. the SFT checkpoint "
                          "written by benchmarks/train_gsm8k_proof.py")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_init)
    return AutoModelForCausalLM.from_pretrained(model_init), tokenizer


def run_from_argv(config_class: type, trainer_class: type, argv: Sequence[str] | None) -> None:
    """Parse ``--config run.yaml [--flag value ...]`` into ``config_class`` with TrlParser, train, save: the body of
    every trainer's ``main``."""
    from trl import TrlParser

    (args,) = TrlParser((config_class,)).parse_args_and_config(args=argv)
    model, tokenizer = build_model_and_tokenizer(args.model_init)
    trainer = trainer_class(model, args, tokenizer)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(args.output_dir)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentgym_r1.trainers.grpo --config run.yaml [--flag value ...]``."""
    run_from_argv(AgentGRPOConfig, AgentGRPOTrainer, argv)


if __name__ == "__main__":
    main()
