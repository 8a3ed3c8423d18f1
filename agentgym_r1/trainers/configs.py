"""Config dataclasses: TRL's ``GRPOConfig`` (and transformers' ``TrainingArguments`` for PPO) plus our fields only.

Each is parsed by ``TrlParser``, so ``--config run.yaml`` and command-line flags both work. ``__post_init__``
rejects combinations that would train something other than what was asked, and says how to fix them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from transformers import SchedulerType, TrainingArguments
from transformers.training_args import OptimizerNames
from trl import GRPOConfig

from agentgym_r1.adapters.env_backends import check_env_backend
from agentgym_r1.error import ConfigError
from agentgym_r1.trainers.advantages import ESTIMATORS
from agentgym_r1.trainers.limits import check_fields

SKIP_EXACT_LOSSES = ("dapo", "cispo", "vespo")
# TRL 1.16 ``GRPOTrainer._compute_loss``: these average over the rows of a micro-batch (grpo, sapo: the mean of
# per-row means; dr_grpo: divided by rows x max_completion_length; luspo: the mean of row sums)
ROW_MEAN_LOSSES = ("grpo", "sapo", "dr_grpo", "luspo")
# transformers' own names (its __post_init__ refuses others with a message that does not name the field)
LIBRARY_CHOICES = {"lr_scheduler_type": tuple(s.value for s in SchedulerType),
                   "optim": tuple(o.value for o in OptimizerNames)}


def _as_dict(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{name} must be a mapping or a JSON object string, got {value!r} ({e.msg})") from e
    if not isinstance(value, dict):
        raise ConfigError(f"{name}={value!r} is a {type(value).__name__}, not a mapping: give keyword arguments, "
                          "e.g. {source: synthetic} in YAML or '{\"source\": \"synthetic\"}' on the command line")
    return value


@contextmanager
def library_refusals(config: str) -> Iterator[None]:
    """TRL's and transformers' own ``__post_init__`` refusals (``ValueError``s: an unknown ``lr_scheduler_type``, a
    generation batch not divisible by ``num_generations``) as :class:`ConfigError`, with theirs as the cause."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"{config}: {e}") from e


@dataclass
class EnvArguments:
    """Which env to train on and how episodes are played (shared by GRPO and PPO)."""

    env_id: str = field(default="AgentR1/GSM8K-v0", metadata={"help": "a registered env id"})
    env_kwargs: dict | str | None = field(default=None, metadata={"help": "keyword arguments for gym.make (JSON)"})
    eval_env_kwargs: dict | str | None = field(
        default=None, metadata={"help": "kwargs for the held-out eval env (default: env_kwargs with seed+1)"})
    max_turns: int = field(default=4, metadata={"help": "turns per episode"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens the model may write per turn"})
    max_prompt_tokens: int = field(
        default=1024, metadata={"help": "tokens the first prompt may hold; a longer one is a failed row, counted in "
                                        "rollout/failed_rows and left out of the loss"})
    max_failed_steps: int = field(
        default=3, metadata={"help": "stop when every rollout row failed (generation or env errors) in this many "
                                     "steps in a row"})
    num_tasks: int = field(default=4096, metadata={"help": "training rows (reset seeds) in the task dataset"})
    env_backend: str = field(default="thread", metadata={"help": "where envs run: thread, process or ray"})
    env_workers: int = field(default=0, metadata={"help": "threads, worker processes or Ray actors for the envs"})
    ray_address: str | None = field(default=None, metadata={"help": "Ray cluster for env_backend: ray (default: "
                                                                    "the connected one, or a local instance)"})
    eval_episodes: int = field(default=64, metadata={"help": "held-out episodes for env/<id>/success at eval"})
    model_init: str | None = field(default=None, metadata={"help": "a local model directory (tokenizer files beside the weights)"})
    loss_mask: bool = field(default=True, metadata={"help": "the loss (and its token count) over agent tokens only; "
                                                            "false: over every completion token, env tokens too"})
    advantage_mask: bool = field(
        default=True, metadata={"help": "advantages (PPO: GAE credit) on agent tokens only; false: on every "
                                        "completion token. Same meaning in GRPO and PPO"})

    def _check_env(self, choices: dict[str, tuple[Any, ...]] | None = None) -> None:
        """Every field's type and range first (:func:`check_fields`), then the env's: before anything reads them."""
        check_fields(self, {**LIBRARY_CHOICES, **(choices or {})})
        if not isinstance(self.env_id, str) or not self.env_id:
            import agentgym_r1

            raise ConfigError(f"env_id={self.env_id!r} is not an env id: give a registered one "
                              f"({', '.join(agentgym_r1.env_ids())}).")
        self.env_kwargs = _as_dict("env_kwargs", self.env_kwargs)
        self.eval_env_kwargs = _as_dict("eval_env_kwargs", self.eval_env_kwargs)
        check_env_backend(self.env_backend, self.env_workers, self.ray_address)
        if self.max_completion_length < self.max_new_tokens:  # type: ignore[attr-defined]
            raise ConfigError(
                f"max_completion_length={self.max_completion_length} < max_new_tokens={self.max_new_tokens}: the "  # type: ignore[attr-defined]
                "completion budget could not hold one turn, so every episode would end at its first turn cut "
                "short. Raise max_completion_length (the budget of the whole episode after the first prompt) or "
                "lower max_new_tokens.")


@dataclass
class AgentGRPOConfig(EnvArguments, GRPOConfig):
    """``GRPOConfig`` with multi-turn env rollouts, our advantage estimators, StarPO-S filtering and mask switches."""

    advantage_estimator: str = field(default="grpo", metadata={"help": f"one of {ESTIMATORS}"})
    process_reward_weight: float = field(
        default=0.0, metadata={"help": "weight of each step's process reward on that step's tokens"})
    keep_ratio: float = field(default=1.0, metadata={"help": "StarPO-S: share of groups kept, by reward std"})
    skip_zero_advantage: bool | None = field(
        default=None, metadata={"help": "leave rows with no advantage on any trained token (groups whose samples all "
                                        "scored the same) out of the forward and backward pass. Exact only for "
                                        "token-sum losses (dapo, cispo, vespo) with beta=0 and no entropy bonus or "
                                        "mask; default (null): on exactly where it is exact"})
    layout: str = field(
        default="concatenated", metadata={"help": "'concatenated' (one row per episode, env tokens masked) or 'step' "
                                                  "(Agent-R1's step-level MDP: one row per turn whose prompt is the "
                                                  "context the model saw; the rows of an episode share its "
                                                  "advantage, group statistics over episodes)"})
    step_context: str | None = field(
        default=None, metadata={"help": "layout=step: what each turn's prompt holds: 'full' (default) or an int k "
                                        "(the task and the last k turns)"})
    echo_trap_window: int = field(default=10, metadata={"help": "log records in the Echo Trap baseline"})
    echo_trap_ratio: float = field(default=0.1, metadata={"help": "warn when a signal falls under ratio*baseline"})

    @property
    def skip_rows_exact(self) -> bool:
        """Whether leaving zero-advantage rows out leaves the update unchanged (TRL 1.16 ``_compute_loss``): only
        losses that sum token terms and divide by ``num_items_in_batch`` (dapo, cispo, vespo; grpo, bnpo, sapo,
        luspo and dr_grpo normalise per micro-batch or per row count), with no KL term, no entropy bonus and no
        entropy mask (both taken over the micro-batch)."""
        return (self.loss_type in SKIP_EXACT_LOSSES and self.beta == 0.0 and self.top_entropy_quantile == 1.0
                and self.entropy_coef == 0.0 and not self.use_adaptive_entropy)

    def __post_init__(self) -> None:
        self._check_env({"advantage_estimator": ESTIMATORS})
        self._check_grpo()
        with library_refusals(type(self).__name__):
            super().__post_init__()
        self._check_step_rows()
        if self.use_vllm:
            from agentgym_r1.trainers.vllm import check_vllm_config

            check_vllm_config(self)

    @property
    def context(self) -> str | int:
        """The rollout engine's ``context`` for this config."""
        if self.step_context in (None, "full"):
            return "full"
        return int(self.step_context)

    def _check_layout(self) -> None:
        if self.layout not in ("concatenated", "step"):
            raise ConfigError(f"layout={self.layout!r}; use 'concatenated' or 'step'")
        if self.layout == "concatenated" and self.step_context not in (None, "full"):
            raise ConfigError(f"step_context={self.step_context!r} needs layout='step': one concatenated row must "
                              "hold the whole history the model saw")
        if self.step_context not in (None, "full") and not str(self.step_context).isdigit():
            raise ConfigError(f"step_context={self.step_context!r}; use 'full' or a number of turns (e.g. 2)")
        if self.layout == "step" and self.use_vllm:
            raise ConfigError("layout='step' with use_vllm=True is not supported yet: vLLM's importance-sampling "
                              "correction is computed on TRL's one-row-per-prompt batch. Use layout='concatenated' "
                              "with vLLM, or generate with transformers for step rows.")

    def _check_step_rows(self) -> None:
        """Step rows and the micro-batches TRL splits them into (after ``steps_per_generation`` and the world size
        are resolved). A row-mean loss (TRL 1.16 ``_compute_loss``: ``.mean()`` over the micro-batch's rows) sees
        padding rows whenever they are added: to a multiple of ``steps_per_generation``, or to the largest row count
        across processes (``AgentGRPOTrainer._rows_on_every_process``); and across processes DDP averages each
        process's own row mean, which weighs a process's rows by how few turns its episodes took."""
        if self.layout != "step" or self.loss_type not in ROW_MEAN_LOSSES:
            return
        processes = self.world_size  # TRL's GRPOConfig.__post_init__ reads it too (generation_batch_size)
        if self.steps_per_generation == 1 and processes == 1:
            return
        fix = (f"Use a token-sum loss (loss_type in {SKIP_EXACT_LOSSES}, normalised by the trained tokens of the "
               "whole batch on every process; the default, dapo, is one)")
        if processes > 1:
            raise ConfigError(
                f"layout='step' with loss_type={self.loss_type!r} on {processes} processes: an episode's turns are "
                "its rows, so each process holds a different number of rows, padded with empty rows to the largest "
                "count; this loss averages over each process's rows, so the padding and the processes' row counts "
                "would scale the update by how many turns the episodes took, and it would differ from the same "
                f"batch on one process. {fix}, or train on one process.")
        raise ConfigError(
            f"layout='step' with loss_type={self.loss_type!r} and steps_per_generation={self.steps_per_generation}: "
            "an episode's turns are its rows, so a generation batch has a varying number of rows, padded with empty "
            "rows to a multiple of steps_per_generation and shuffled into micro-batches; this loss averages over "
            "the rows of a micro-batch, so the padding would shrink each update by an amount that depends on how "
            f"many turns the episodes took. {fix}, or one optimizer step per generation (steps_per_generation: 1, "
            "or gradient_accumulation_steps: 1 with no generation_batch_size).")

    def _check_grpo(self) -> None:
        if not self.advantage_mask and self.loss_mask:
            raise ConfigError(
                "advantage_mask=False with loss_mask=True changes nothing in GRPO: env tokens would carry an advantage "
                "but are not in the loss, and agent tokens get the same advantage either way. For the Agent-R1 "
                "ablation set loss_mask=False as well (no masks), or train with PPO, where the advantage mask "
                "changes GAE.")
        if self.skip_zero_advantage and not self.skip_rows_exact:
            raise ConfigError(
                f"skip_zero_advantage=True with loss_type={self.loss_type!r}, beta={self.beta}, entropy_coef="
                f"{self.entropy_coef}, use_adaptive_entropy={self.use_adaptive_entropy}, top_entropy_quantile="
                f"{self.top_entropy_quantile}: dropping rows would rescale this loss (it normalises over the "
                f"micro-batch). Row skipping is exact only for loss_type in {SKIP_EXACT_LOSSES} with beta=0 and no "
                "entropy bonus or mask. Leave skip_zero_advantage unset (it turns on only where exact) or false.")
        self._check_layout()
        weights = self.reward_weights
        if weights is not None and (not isinstance(weights, list) or len(weights) != 1 or isinstance(weights[0], bool)
                                    or not isinstance(weights[0], int | float) or not math.isfinite(weights[0])):
            raise ConfigError(f"reward_weights={weights!r}: the trainer has one reward function (the episode's "
                              "reward), so give one finite weight, e.g. [1.0], or leave reward_weights out.")
        if self.repetition_penalty != 1.0:
            raise ConfigError(
                f"repetition_penalty={self.repetition_penalty}: it changes the distribution tokens are sampled from, "
                "but the loss recomputes log-probabilities without it, so the update would be off-policy. Leave it "
                "at 1.0 for training.")


@dataclass
class AgentPPOConfig(EnvArguments, TrainingArguments):
    """Multi-turn PPO: a critic, GAE over agent tokens (or over steps), clipped policy and value losses."""

    checkpoint_files = ("critic.pt",)  # beside the policy's weights in every checkpoint (not a field)

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
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling"})
    top_k: int = field(default=0, metadata={"help": "top-k sampling (0: off)"})
    model_init_kwargs: dict | str | None = field(
        default=None, metadata={"help": "from_pretrained kwargs for model_init (JSON); dtype defaults to float32 "
                                        "(fp32 master weights; bf16: true trains under autocast)"})
    use_vllm: bool = field(default=False, metadata={"help": "generate rollouts with a colocated vLLM engine"})
    vllm_mode: str = field(default="colocate", metadata={"help": "PPO supports 'colocate' (an engine in the "
                                                                 "training process)"})
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={"help": "share of GPU memory for vLLM"})
    vllm_max_model_length: int | None = field(default=None, metadata={"help": "vLLM's context length"})

    def __post_init__(self) -> None:
        self._check_env()
        self.model_init_kwargs = _as_dict("model_init_kwargs", self.model_init_kwargs)
        if self.use_vllm and self.vllm_mode != "colocate":
            raise ConfigError(f"PPO with vllm_mode={self.vllm_mode!r}: PPO generates on a colocated engine only "
                              "(its weights are synced in process). Set vllm_mode: colocate, or train with GRPO.")
        if self.use_vllm:
            from agentgym_r1.trainers.vllm import check_vllm_config

            check_vllm_config(self)
        if self.gradient_accumulation_steps != 1:
            raise ConfigError(
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}: a PPO iteration already takes "
                "several optimizer steps (one per minibatch of mini_batch_size episodes, ppo_epochs passes), so "
                "accumulation would skip steps and carry gradients across rollouts. Keep it 1 and set "
                "mini_batch_size (or rollout_batch_size) instead.")
        if self.level not in ("token", "step"):
            raise ConfigError(f"level={self.level!r}; use 'token' (GAE over agent tokens) or 'step' (GAE over steps)")
        if self.rollout_batch_size % self.mini_batch_size:
            raise ConfigError(f"rollout_batch_size={self.rollout_batch_size} must be a multiple of "
                              f"mini_batch_size={self.mini_batch_size}")
        if not self.advantage_mask and self.level == "step":
            raise ConfigError("advantage_mask=False needs level='token': step-level GAE only ever credits agent "
                              "turns. Set level='token' or keep advantage_mask=True.")
        with library_refusals(type(self).__name__):
            super().__post_init__()
