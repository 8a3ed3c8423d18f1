"""The type and range of every numeric and named-choice field of the trainers' configs, ours and the inherited
TRL / transformers ones that change what is trained (read against TRL 1.16's ``GRPOConfig`` and transformers 5's
``TrainingArguments``).

``check_fields(config)`` runs first in each config's ``__post_init__``, before anything reads a value, so that a
``learning_rate: .inf`` (which trained every weight to NaN and exited 0), a ``temperature: .nan``, a ``num_tasks: 0``
or a ``loss_type: nope`` ends in one :class:`ConfigError` naming the field, the value and the fix, never a run that
fails steps later or a library traceback. A field a config does not have is skipped, so one table serves GRPO and PPO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agentgym_r1.error import ConfigError

# TRL 1.16 GRPOTrainer._compute_loss: any other name raises "Unknown loss type" at the first step
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")
SEED_MAX = 2**32 - 1  # transformers' set_seed seeds numpy, whose seeds are 32-bit


@dataclass(frozen=True)
class Num:
    """A number in ``[low, high]`` (``open_low`` / ``open_high``: the bound excluded); ``integer`` for counts;
    ``optional``: ``None`` allowed; ``also``: values allowed outside the range (``max_steps: -1``)."""

    low: float | None = None
    high: float | None = None
    integer: bool = False
    optional: bool = False
    open_low: bool = False
    open_high: bool = False
    also: tuple[float | str, ...] = ()
    fix: str = ""

    def bounds(self) -> str:
        kind = "a whole number" if self.integer else "a finite number"
        lo = None if self.low is None else f"{_num(self.low)} {'<' if self.open_low else '<='} "
        hi = None if self.high is None else f" {'<' if self.open_high else '<='} {_num(self.high)}"
        if lo and hi:
            span = f" in {lo}value{hi}"
        elif lo:
            span = f" {'>' if self.open_low else '>='} {_num(self.low)}"
        else:
            span = f"{hi}" if hi else ""
        also = "".join(f" or {_num(a)}" for a in self.also) + (" or null" if self.optional else "")
        return f"{kind}{span}{also}"


def _num(x: float | str) -> str:
    return repr(x) if isinstance(x, str) else str(x) if isinstance(x, int) else f"{x:g}"


def _count(low: int = 1, **kw: Any) -> Num:
    return Num(low=low, integer=True, **kw)


POSITIVE = Num(low=0.0, open_low=True)
NON_NEGATIVE = Num(low=0.0)
UNIT = Num(low=0.0, high=1.0)
PORT = Num(low=1, high=65535, integer=True)

FIELDS: dict[str, Num] = {
    # ours (EnvArguments, AgentGRPOConfig, AgentPPOConfig)
    "max_turns": _count(),
    "max_new_tokens": _count(),
    "max_prompt_tokens": _count(),
    "max_failed_steps": _count(),
    "num_tasks": _count(fix="The task dataset needs at least one row (reset seed); the default is 4096."),
    "env_workers": _count(0),
    "eval_episodes": _count(0),
    "process_reward_weight": NON_NEGATIVE,
    "keep_ratio": Num(low=0.0, high=1.0, open_low=True),
    "echo_trap_window": _count(),
    "echo_trap_ratio": UNIT,
    "max_staleness": _count(0, fix="Use 0 for synchronous rollouts, or the updates a row may lag behind (e.g. 1)."),
    "staleness_is_cap": POSITIVE,
    "dynamic_sampling_max_tries": _count(fix="It counts the rollouts a step may play, the first included (e.g. 4)."),
    "curriculum_window": _count(fix="It is how many recent groups of a level make its pass rate (e.g. 8)."),
    "curriculum_explore": UNIT,
    "rollout_batch_size": _count(),
    "mini_batch_size": _count(),
    "ppo_epochs": _count(),
    "clip_range": POSITIVE,
    "value_clip_range": POSITIVE,
    "value_coef": NON_NEGATIVE,
    "critic_learning_rate": Num(low=0.0, high=1.0, open_low=True, optional=True),
    "gamma": UNIT,
    "lam": UNIT,
    # LoRA (agentgym_r1.trainers.lora.LoraArguments, TRL's ModelConfig names)
    "lora_r": _count(fix="The adapter's rank: e.g. 8, 16 or 64."),
    "lora_alpha": Num(low=0.0, open_low=True, fix="The adapter's scale is lora_alpha / lora_r; e.g. 2 * lora_r."),
    "lora_dropout": Num(low=0.0, high=1.0, open_high=True),
    # sampling (TRL's GRPOConfig; AgentPPOConfig's own)
    "temperature": Num(low=0.0, open_low=True, fix="Logits are divided by it; use 1.0 to sample from the policy."),
    "top_p": Num(low=0.0, high=1.0, open_low=True),
    "top_k": _count(0, fix="Use 0 to turn top-k off."),
    "min_p": Num(low=0.0, high=1.0, optional=True),
    "max_completion_length": _count(fix="It is the token budget of a whole episode after the first prompt."),
    # TRL's GRPOConfig
    "num_generations": _count(
        2,
        optional=True,
        fix="GRPO compares samples of the same prompt, so it needs at least 2 "
        "per prompt. Set num_generations >= 2 (e.g. 8), or train with "
        "PPO, which needs no groups.",
    ),
    "num_generations_eval": _count(optional=True),
    "generation_batch_size": _count(optional=True),
    "steps_per_generation": _count(optional=True),
    "num_iterations": _count(),
    "beta": NON_NEGATIVE,
    "epsilon": POSITIVE,
    "epsilon_high": Num(low=0.0, open_low=True, optional=True),
    "delta": Num(low=1.0, open_low=True, optional=True),
    "sapo_temperature_neg": POSITIVE,
    "sapo_temperature_pos": POSITIVE,
    "vespo_k_pos": POSITIVE,
    "vespo_lambda_pos": POSITIVE,
    "vespo_k_neg": POSITIVE,
    "vespo_lambda_neg": POSITIVE,
    "ref_model_mixup_alpha": UNIT,
    "ref_model_sync_steps": _count(),
    "top_entropy_quantile": UNIT,
    "entropy_coef": NON_NEGATIVE,
    "entropy_coef_min": NON_NEGATIVE,
    "entropy_coef_max": NON_NEGATIVE,
    "entropy_coef_delta": NON_NEGATIVE,
    "entropy_target": NON_NEGATIVE,
    "router_aux_loss_coef": Num(low=0.0, optional=True),
    "vllm_gpu_memory_utilization": Num(low=0.0, high=1.0, open_low=True),
    "vllm_max_model_length": _count(optional=True),
    "vllm_tensor_parallel_size": _count(),
    "vllm_server_port": PORT,
    "vllm_group_port": PORT,
    "vllm_server_timeout": POSITIVE,
    "vllm_importance_sampling_clip_max": Num(low=0.0, open_low=True, optional=True),
    "vllm_importance_sampling_clip_min": Num(low=0.0, optional=True),
    "vllm_importance_sampling_cap": Num(low=0.0, open_low=True, optional=True),
    "off_policy_mask_threshold": Num(low=0.0, optional=True),
    "max_tool_calling_iterations": _count(optional=True),
    "num_completions_to_print": _count(0, optional=True),
    # transformers' TrainingArguments
    "learning_rate": Num(
        low=0.0,
        high=1.0,
        open_low=True,
        fix="Give a positive rate, e.g. 1e-6 for a real model or 3e-4 for the tiny one.",
    ),
    "per_device_train_batch_size": _count(),
    "per_device_eval_batch_size": _count(),
    "gradient_accumulation_steps": _count(),
    "max_steps": _count(also=(-1,), fix="Give the number of optimizer steps, or -1 to train num_train_epochs."),
    "num_train_epochs": POSITIVE,
    "warmup_steps": NON_NEGATIVE,
    "weight_decay": NON_NEGATIVE,
    "adam_beta1": Num(low=0.0, high=1.0, open_high=True),
    "adam_beta2": Num(low=0.0, high=1.0, open_high=True),
    "adam_epsilon": POSITIVE,
    "max_grad_norm": Num(low=0.0, fix="Use 0 to turn gradient clipping off."),
    "label_smoothing_factor": Num(low=0.0, high=1.0, open_high=True),
    "neftune_noise_alpha": Num(low=0.0, optional=True),
    "logging_steps": POSITIVE,
    "save_steps": POSITIVE,
    "eval_steps": Num(low=0.0, open_low=True, optional=True),
    "seed": Num(low=0, high=SEED_MAX, integer=True),
    "data_seed": Num(low=0, high=SEED_MAX, integer=True, optional=True),
    "dataloader_num_workers": _count(0),
    "dataloader_prefetch_factor": _count(optional=True),
    "torch_empty_cache_steps": _count(optional=True),
    "eval_delay": NON_NEGATIVE,
    "eval_accumulation_steps": _count(optional=True),
    "save_total_limit": _count(0, optional=True),
    "ddp_bucket_cap_mb": _count(optional=True),
    "ddp_timeout": _count(),
    "local_rank": _count(-1),
    "pad_to_multiple_of": _count(optional=True, also=("auto",)),
}

CHOICES: dict[str, tuple[Any, ...]] = {
    "loss_type": LOSS_TYPES,
    "importance_sampling_level": ("token", "sequence"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "scale_rewards": ("group", "batch", "none", True, False),
    "vllm_mode": ("colocate", "server"),
    "vllm_importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
    "layout": ("concatenated", "step"),
    "level": ("token", "step"),
    "lora_task_type": ("CAUSAL_LM",),  # the policy is a causal LM; other peft task types train another head
}


def number_problem(value: Any, rule: Num) -> str | None:
    """What is wrong with ``value`` under ``rule`` (``None``: nothing)."""
    if value is None:
        return None if rule.optional else "is not set"
    if value in rule.also and isinstance(value, bool) == isinstance(rule.also[0], bool):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"is a {type(value).__name__}, not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    if rule.integer and not isinstance(value, int):
        return "is a float, not an integer"
    if rule.low is not None and (value < rule.low or (rule.open_low and value == rule.low)):
        return "is negative" if value < 0 else "is zero" if value == 0 else "is too small"
    if rule.high is not None and (value > rule.high or (rule.open_high and value == rule.high)):
        return "is too large"
    return None


def check_fields(config: Any, choices: dict[str, tuple[Any, ...]] | None = None) -> None:
    """Every field of :data:`FIELDS` and :data:`CHOICES` (and ``choices``, a config's own named options) that
    ``config`` has: a :class:`ConfigError` naming the first bad one, its value, what it must be and the fix."""
    for name, rule in FIELDS.items():
        if not hasattr(config, name):
            continue
        value = getattr(config, name)
        problem = number_problem(value, rule)
        if problem is not None:
            raise ConfigError(
                f"{name}={value!r} {problem}: it must be {rule.bounds()}. "
                f"{rule.fix or f'Set {name} to such a value in the config (or leave it out).'}"
            )
    for name, valid in {**CHOICES, **(choices or {})}.items():
        value = getattr(config, name, valid[0])
        if not any(value == v and isinstance(value, bool) == isinstance(v, bool) for v in valid):
            names = ", ".join(repr(v) for v in valid if isinstance(v, str))
            raise ConfigError(f"{name}={value!r} is not one of the valid choices: {names}. Use one of them.")
