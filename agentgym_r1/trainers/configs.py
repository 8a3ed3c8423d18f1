"""Config dataclasses: TRL's ``GRPOConfig`` (and transformers' ``TrainingArguments`` for PPO) plus our fields only.

Each is parsed by ``TrlParser``, so ``--config run.yaml`` and command-line flags both work. ``__post_init__``
rejects combinations that would train something other than what was asked, and says how to fix them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments
from trl import GRPOConfig

from agentgym_r1.error import ConfigError
from agentgym_r1.trainers.advantages import ESTIMATORS


def _as_dict(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{name} must be a mapping or a JSON object string, got {value!r} ({e.msg})") from e
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping, got {type(value).__name__}")
    return value


@dataclass
class EnvArguments:
    """Which env to train on and how episodes are played (shared by GRPO and PPO)."""

    env_id: str = field(default="AgentR1/GSM8K-v0", metadata={"help": "a registered env id"})
    env_kwargs: dict | str | None = field(default=None, metadata={"help": "keyword arguments for gym.make (JSON)"})
    eval_env_kwargs: dict | str | None = field(
        default=None, metadata={"help": "kwargs for the held-out eval env (default: env_kwargs with seed+1)"})
    max_turns: int = field(default=4, metadata={"help": "turns per episode"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens the model may write per turn"})
    num_tasks: int = field(default=4096, metadata={"help": "training rows (reset seeds) in the task dataset"})
    eval_episodes: int = field(default=64, metadata={"help": "held-out episodes for env/<id>/success at eval"})
    model_init: str | None = field(default=None, metadata={"help": "a local model directory (or 'tiny')"})
    loss_mask: bool = field(default=True, metadata={"help": "mask environment tokens out of the loss"})
    advantage_mask: bool = field(default=True, metadata={"help": "advantages only on agent tokens"})

    def _check_env(self) -> None:
        self.env_kwargs = _as_dict("env_kwargs", self.env_kwargs)
        self.eval_env_kwargs = _as_dict("eval_env_kwargs", self.eval_env_kwargs)
        if self.max_turns < 1 or self.max_new_tokens < 1:
            raise ConfigError(f"max_turns and max_new_tokens must be >= 1, got {self.max_turns}, {self.max_new_tokens}")


@dataclass
class AgentGRPOConfig(EnvArguments, GRPOConfig):
    """``GRPOConfig`` with multi-turn env rollouts, our advantage estimators, StarPO-S filtering and mask switches."""

    advantage_estimator: str = field(default="grpo", metadata={"help": f"one of {ESTIMATORS}"})
    process_reward_weight: float = field(
        default=0.0, metadata={"help": "weight of each step's process reward on that step's tokens"})
    keep_ratio: float = field(default=1.0, metadata={"help": "StarPO-S: share of groups kept, by reward std"})
    skip_zero_advantage: bool = field(
        default=True, metadata={"help": "leave rows with no advantage on any trained token (groups whose samples all "
                                        "scored the same) out of the forward and backward pass; the gradient is "
                                        "the same, as long as beta=0"})
    echo_trap_window: int = field(default=10, metadata={"help": "log records in the Echo Trap baseline"})
    echo_trap_ratio: float = field(default=0.1, metadata={"help": "warn when a signal falls under ratio*baseline"})

    def __post_init__(self) -> None:
        if self.num_generations is not None and self.num_generations < 2:
            raise ConfigError(
                f"num_generations={self.num_generations}: GRPO compares samples of the same prompt, so it needs at "
                "least 2 per prompt. Set num_generations >= 2 (e.g. 8), or train with PPO, which needs no groups.")
        if self.advantage_estimator not in ESTIMATORS:
            raise ConfigError(f"advantage_estimator={self.advantage_estimator!r}; use one of {ESTIMATORS}")
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ConfigError(f"keep_ratio must be in (0, 1], got {self.keep_ratio}")
        if not self.advantage_mask and self.process_reward_weight == 0.0:
            raise ConfigError(
                "advantage_mask=False changes nothing here: with outcome-only GRPO every token of an episode gets the "
                "same advantage, so the loss mask alone decides which tokens train. Set process_reward_weight > 0 "
                "(token-level credit), use loss_mask=False for the Agent-R1 ablation, or train with PPO (GAE).")
        self._check_env()
        super().__post_init__()


@dataclass
class AgentPPOConfig(EnvArguments, TrainingArguments):
    """Multi-turn PPO: a critic, GAE over agent tokens (or over steps), clipped policy and value losses."""

    rollout_batch_size: int = field(default=32, metadata={"help": "episodes played per PPO iteration"})
    ppo_epochs: int = field(default=2, metadata={"help": "passes over each rollout batch"})
    mini_batch_size: int = field(default=16, metadata={"help": "episodes per optimiser step"})
    clip_range: float = field(default=0.2, metadata={"help": "policy ratio clip"})
    value_clip_range: float = field(default=0.2, metadata={"help": "value clip around the old values"})
    value_coef: float = field(default=0.5, metadata={"help": "weight of the value loss"})
    critic_learning_rate: float | None = field(default=None, metadata={"help": "default: learning_rate"})
    gamma: float = field(default=1.0, metadata={"help": "discount per agent token (token level) or per step"})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda"})
    level: str = field(default="token", metadata={"help": "'token' (GAE over agent tokens) or 'step'"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    max_completion_length: int = field(default=512, metadata={"help": "tokens per episode after the prompt"})

    def __post_init__(self) -> None:
        if self.level not in ("token", "step"):
            raise ConfigError(f"level={self.level!r}; use 'token' (GAE over agent tokens) or 'step' (GAE over steps)")
        if self.rollout_batch_size % self.mini_batch_size:
            raise ConfigError(f"rollout_batch_size={self.rollout_batch_size} must be a multiple of "
                              f"mini_batch_size={self.mini_batch_size}")
        if not self.advantage_mask and self.level == "step":
            raise ConfigError("advantage_mask=False needs level='token': step-level GAE only ever credits agent "
                              "turns. Set level='token' or keep advantage_mask=True.")
        self._check_env()
        super().__post_init__()
