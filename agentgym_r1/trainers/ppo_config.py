"""The PPO trainer's config (:class:`AgentPPOConfig`), beside the trainer as TRL lays out its own.

Parsed by ``TrlParser``, so ``--config run.yaml`` and command-line flags both work. ``__post_init__`` rejects
combinations PPO cannot train, and says how to fix them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

from agentgym_r1.error import ConfigError
from agentgym_r1.trainers.env_config import EnvArguments, as_dict, library_refusals
from agentgym_r1.trainers.lora import LoraArguments
from agentgym_r1.trainers.sharding import check_sharding


@dataclass
class AgentPPOConfig(EnvArguments, LoraArguments, TrainingArguments):
    r"""
    Configuration class for the [`~agentgym_r1.trainers.ppo.AgentPPOTrainer`]: transformers'
    [`~transformers.TrainingArguments`] with multi-turn PPO's fields (a critic, GAE over agent tokens or over steps,
    clipped policy and value losses). The env fields are [`EnvArguments`]'s, the LoRA fields [`LoraArguments`]'s
    (with `use_peft` the critic trains an adapter of its own on a frozen copy of the base, and its value head).
    `per_device_train_batch_size` is set to `rollout_batch_size` (each `Trainer` step plays that many episodes per
    process) and `remove_unused_columns` to `False` (the collator reads the dataset's `prompt` column).

    Parameters:
        > Parameters that control the PPO iteration

        rollout_batch_size (`int`, *optional*, defaults to `32`):
            Episodes played per PPO iteration, per process.
        ppo_epochs (`int`, *optional*, defaults to `2`):
            Passes over each rollout batch.
        mini_batch_size (`int`, *optional*, defaults to `16`):
            Episodes per optimizer step; `rollout_batch_size` must be a multiple of it.

        > Parameters that control the losses

        clip_range (`float`, *optional*, defaults to `0.2`):
            Clip of the policy ratio.
        value_clip_range (`float`, *optional*, defaults to `0.2`):
            Clip of the values around the old values.
        value_coef (`float`, *optional*, defaults to `0.5`):
            Weight of the value loss.
        critic_learning_rate (`float`, *optional*):
            Learning rate of the critic. Defaults to `learning_rate`.

        > Parameters that control the advantages

        gamma (`float`, *optional*, defaults to `1.0`):
            Discount per agent token (`level="token"`) or per step (`level="step"`).
        lam (`float`, *optional*, defaults to `0.95`):
            GAE lambda.
        level (`str`, *optional*, defaults to `"token"`):
            `"token"`: GAE over agent tokens; `"step"`: GAE over steps, one value per turn.

        > Parameters that control generation

        temperature (`float`, *optional*, defaults to `1.0`):
            Sampling temperature.
        top_p (`float`, *optional*, defaults to `1.0`):
            Nucleus sampling.
        top_k (`int`, *optional*, defaults to `0`):
            Top-k sampling (0: off).
        max_completion_length (`int`, *optional*, defaults to `512`):
            Tokens per episode after the prompt.
        model_init_kwargs (`dict` or `str`, *optional*):
            `from_pretrained` keyword arguments for `model_init` (JSON on the command line); the dtype defaults to
            float32 (fp32 master weights; `bf16: true` trains under autocast).
        use_vllm (`bool`, *optional*, defaults to `False`):
            Generate rollouts with a colocated vLLM engine.
        vllm_mode (`str`, *optional*, defaults to `"colocate"`):
            PPO supports `"colocate"` only (an engine in the training process).
        vllm_gpu_memory_utilization (`float`, *optional*, defaults to `0.3`):
            Share of GPU memory for vLLM.
        vllm_max_model_length (`int`, *optional*):
            vLLM's context length.
    """

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
        default=None,
        metadata={
            "help": "from_pretrained kwargs for model_init (JSON); dtype defaults to float32 "
            "(fp32 master weights; bf16: true trains under autocast)"
        },
    )
    use_vllm: bool = field(default=False, metadata={"help": "generate rollouts with a colocated vLLM engine"})
    vllm_mode: str = field(
        default="colocate", metadata={"help": "PPO supports 'colocate' (an engine in the training process)"}
    )
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={"help": "share of GPU memory for vLLM"})
    vllm_max_model_length: int | None = field(default=None, metadata={"help": "vLLM's context length"})

    def __post_init__(self) -> None:
        self._check_env()
        self._check_lora()
        self.model_init_kwargs = as_dict("model_init_kwargs", self.model_init_kwargs)
        if self.use_vllm and self.vllm_mode != "colocate":
            raise ConfigError(
                f"PPO with vllm_mode={self.vllm_mode!r}: PPO generates on a colocated engine only "
                "(its weights are synced in process). Set vllm_mode: colocate, or train with GRPO."
            )
        if self.use_vllm:
            from agentgym_r1.trainers.vllm import check_vllm_config

            check_vllm_config(self)
        if self.gradient_accumulation_steps != 1:
            raise ConfigError(
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}: a PPO iteration already takes "
                "several optimizer steps (one per minibatch of mini_batch_size episodes, ppo_epochs passes), so "
                "accumulation would skip steps and carry gradients across rollouts. Keep it 1 and set "
                "mini_batch_size (or rollout_batch_size) instead."
            )
        if self.level not in ("token", "step"):
            raise ConfigError(f"level={self.level!r}; use 'token' (GAE over agent tokens) or 'step' (GAE over steps)")
        if self.rollout_batch_size % self.mini_batch_size:
            raise ConfigError(
                f"rollout_batch_size={self.rollout_batch_size} must be a multiple of "
                f"mini_batch_size={self.mini_batch_size}"
            )
        if not self.advantage_mask and self.level == "step":
            raise ConfigError(
                "advantage_mask=False needs level='token': step-level GAE only ever credits agent "
                "turns. Set level='token' or keep advantage_mask=True."
            )
        # before transformers reads fsdp/deepspeed
        check_sharding(self, generates_with_transformers=not self.use_vllm, ppo_vllm=self.use_vllm, saves_critic=True)
        with library_refusals(type(self).__name__):
            super().__post_init__()
        # what the trainer needs of transformers' fields (set in AgentPPOTrainer.__init__ before): a Trainer step
        # plays rollout_batch_size episodes per process, and the collator reads the dataset's prompt column
        self.per_device_train_batch_size = self.rollout_batch_size
        self.remove_unused_columns = False
