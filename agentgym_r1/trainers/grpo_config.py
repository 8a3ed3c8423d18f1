"""The GRPO trainer's config (:class:`AgentGRPOConfig`), beside the trainer as TRL lays out its own.

Parsed by ``TrlParser``, so ``--config run.yaml`` and command-line flags both work. ``__post_init__`` rejects
combinations that would train something other than what was asked, and says how to fix them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import GRPOConfig

from agentgym_r1.error import ConfigError
from agentgym_r1.trainers.advantages import ESTIMATORS
from agentgym_r1.trainers.env_config import EnvArguments, library_refusals
from agentgym_r1.trainers.lora import LoraArguments

SKIP_EXACT_LOSSES = ("dapo", "cispo", "vespo")
# TRL 1.16 ``GRPOTrainer._compute_loss``: these average over the rows of a micro-batch (grpo, sapo: the mean of
# per-row means; dr_grpo: divided by rows x max_completion_length; luspo: the mean of row sums)
ROW_MEAN_LOSSES = ("grpo", "sapo", "dr_grpo", "luspo")


@dataclass
class AgentGRPOConfig(EnvArguments, LoraArguments, GRPOConfig):
    r"""
    Configuration class for the [`~agentgym_r1.trainers.grpo.AgentGRPOTrainer`]: TRL's [`~trl.GRPOConfig`] with
    multi-turn env rollouts, our advantage estimators, StarPO-S filtering and the mask switches. The env fields are
    [`EnvArguments`]'s, the LoRA fields (`use_peft`, `lora_r`, ...) [`LoraArguments`]'s; everything else is TRL's,
    refused where this trainer cannot honour it.

    Parameters:
        > Parameters that control the advantages

        advantage_estimator (`str`, *optional*, defaults to `"grpo"`):
            One of `"grpo"`, `"rloo"`, `"reinforce_pp"` (`agentgym_r1.trainers.advantages.ESTIMATORS`).
        process_reward_weight (`float`, *optional*, defaults to `0.0`):
            Weight of each step's whitened process reward, added to that step's tokens only.
        keep_ratio (`float`, *optional*, defaults to `1.0`):
            StarPO-S: the share of groups kept, those of highest reward std.
        skip_zero_advantage (`bool`, *optional*):
            Leave rows with no advantage on any trained token out of the forward and backward pass. Exact only for
            token-sum losses (`dapo`, `cispo`, `vespo`) with `beta=0` and no entropy bonus or mask; by default on
            exactly where it is exact.

        > Parameters that control the rows

        layout (`str`, *optional*, defaults to `"concatenated"`):
            `"concatenated"`: one row per episode, env tokens masked; `"step"`: Agent-R1's step-level MDP, one row
            per turn whose prompt is the context the model saw, the rows of an episode sharing its advantage.
        step_context (`str`, *optional*):
            With `layout="step"`, what each turn's prompt holds: `"full"` (default) or an int k (the task and the
            last k turns).

        > Parameters that control the Echo Trap monitor

        echo_trap_window (`int`, *optional*, defaults to `10`):
            Log records in the Echo Trap baseline.
        echo_trap_ratio (`float`, *optional*, defaults to `0.1`):
            Warn when a signal falls under `ratio` times its baseline.
    """

    advantage_estimator: str = field(default="grpo", metadata={"help": f"one of {ESTIMATORS}"})
    process_reward_weight: float = field(
        default=0.0, metadata={"help": "weight of each step's process reward on that step's tokens"}
    )
    keep_ratio: float = field(default=1.0, metadata={"help": "StarPO-S: share of groups kept, by reward std"})
    skip_zero_advantage: bool | None = field(
        default=None,
        metadata={
            "help": "leave rows with no advantage on any trained token (groups whose samples all "
            "scored the same) out of the forward and backward pass. Exact only for "
            "token-sum losses (dapo, cispo, vespo) with beta=0 and no entropy bonus or "
            "mask; default (null): on exactly where it is exact"
        },
    )
    layout: str = field(
        default="concatenated",
        metadata={
            "help": "'concatenated' (one row per episode, env tokens masked) or 'step' "
            "(Agent-R1's step-level MDP: one row per turn whose prompt is the "
            "context the model saw; the rows of an episode share its "
            "advantage, group statistics over episodes)"
        },
    )
    step_context: str | None = field(
        default=None,
        metadata={
            "help": "layout=step: what each turn's prompt holds: 'full' (default) or an int k "
            "(the task and the last k turns)"
        },
    )
    echo_trap_window: int = field(default=10, metadata={"help": "log records in the Echo Trap baseline"})
    echo_trap_ratio: float = field(default=0.1, metadata={"help": "warn when a signal falls under ratio*baseline"})

    @property
    def skip_rows_exact(self) -> bool:
        """Whether leaving zero-advantage rows out leaves the update unchanged (TRL 1.16 ``_compute_loss``): only
        losses that sum token terms and divide by ``num_items_in_batch`` (dapo, cispo, vespo; grpo, bnpo, sapo,
        luspo and dr_grpo normalise per micro-batch or per row count), with no KL term, no entropy bonus and no
        entropy mask (both taken over the micro-batch)."""
        return (
            self.loss_type in SKIP_EXACT_LOSSES
            and self.beta == 0.0
            and self.top_entropy_quantile == 1.0
            and self.entropy_coef == 0.0
            and not self.use_adaptive_entropy
        )

    def __post_init__(self) -> None:
        self._check_env({"advantage_estimator": ESTIMATORS})
        self._check_lora()
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
            raise ConfigError(
                f"step_context={self.step_context!r} needs layout='step': one concatenated row must "
                "hold the whole history the model saw"
            )
        if self.step_context not in (None, "full") and not str(self.step_context).isdigit():
            raise ConfigError(f"step_context={self.step_context!r}; use 'full' or a number of turns (e.g. 2)")
        if self.layout == "step" and self.use_vllm:
            raise ConfigError(
                "layout='step' with use_vllm=True is not supported yet: vLLM's importance-sampling "
                "correction is computed on TRL's one-row-per-prompt batch. Use layout='concatenated' "
                "with vLLM, or generate with transformers for step rows."
            )

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
        fix = (
            f"Use a token-sum loss (loss_type in {SKIP_EXACT_LOSSES}, normalised by the trained tokens of the "
            "whole batch on every process; the default, dapo, is one)"
        )
        if processes > 1:
            raise ConfigError(
                f"layout='step' with loss_type={self.loss_type!r} on {processes} processes: an episode's turns are "
                "its rows, so each process holds a different number of rows, padded with empty rows to the largest "
                "count; this loss averages over each process's rows, so the padding and the processes' row counts "
                "would scale the update by how many turns the episodes took, and it would differ from the same "
                f"batch on one process. {fix}, or train on one process."
            )
        raise ConfigError(
            f"layout='step' with loss_type={self.loss_type!r} and steps_per_generation={self.steps_per_generation}: "
            "an episode's turns are its rows, so a generation batch has a varying number of rows, padded with empty "
            "rows to a multiple of steps_per_generation and shuffled into micro-batches; this loss averages over "
            "the rows of a micro-batch, so the padding would shrink each update by an amount that depends on how "
            f"many turns the episodes took. {fix}, or one optimizer step per generation (steps_per_generation: 1, "
            "or gradient_accumulation_steps: 1 with no generation_batch_size)."
        )

    def _check_grpo(self) -> None:
        if not self.advantage_mask and self.loss_mask:
            raise ConfigError(
                "advantage_mask=False with loss_mask=True changes nothing in GRPO: env tokens would carry an advantage "
                "but are not in the loss, and agent tokens get the same advantage either way. For the Agent-R1 "
                "ablation set loss_mask=False as well (no masks), or train with PPO, where the advantage mask "
                "changes GAE."
            )
        if self.skip_zero_advantage and not self.skip_rows_exact:
            raise ConfigError(
                f"skip_zero_advantage=True with loss_type={self.loss_type!r}, beta={self.beta}, entropy_coef="
                f"{self.entropy_coef}, use_adaptive_entropy={self.use_adaptive_entropy}, top_entropy_quantile="
                f"{self.top_entropy_quantile}: dropping rows would rescale this loss (it normalises over the "
                f"micro-batch). Row skipping is exact only for loss_type in {SKIP_EXACT_LOSSES} with beta=0 and no "
                "entropy bonus or mask. Leave skip_zero_advantage unset (it turns on only where exact) or false."
            )
        self._check_layout()
        weights = self.reward_weights
        if weights is not None and (
            not isinstance(weights, list)
            or len(weights) != 1
            or isinstance(weights[0], bool)
            or not isinstance(weights[0], int | float)
            or not math.isfinite(weights[0])
        ):
            raise ConfigError(
                f"reward_weights={weights!r}: the trainer has one reward function (the episode's "
                "reward), so give one finite weight, e.g. [1.0], or leave reward_weights out."
            )
        if self.repetition_penalty != 1.0:
            raise ConfigError(
                f"repetition_penalty={self.repetition_penalty}: it changes the distribution tokens are sampled from, "
                "but the loss recomputes log-probabilities without it, so the update would be off-policy. Leave it "
                "at 1.0 for training."
            )
