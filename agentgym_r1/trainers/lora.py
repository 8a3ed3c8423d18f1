"""LoRA / PEFT for both trainers: the config fields (spelled as TRL's ``ModelConfig`` spells them), their checks, the
``peft.LoraConfig`` they make, and what the trainers need of an adapted model (merged weights for vLLM, the base
for the reference log-probabilities, the adapter's state for checkpoints).

GRPO hands the ``LoraConfig`` to TRL's ``GRPOTrainer`` (``peft_config=``), which wraps the policy with
``peft.get_peft_model``: the base is frozen, only the adapter trains, and with ``beta != 0`` the reference is the
base with the adapter disabled (TRL 1.16 ``GRPOTrainer.__init__`` and ``_generate_and_score_completions``).
PPO wraps the policy itself and gives the critic an adapter of its own (:func:`adapt_policy_and_critic`).

Only ``CAUSAL_LM`` adapters are trained (the policy is a causal LM); ``load_in_4bit`` / ``load_in_8bit`` (QLoRA, TRL's
spelling) quantize the frozen base with bitsandbytes, which needs a CUDA device.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from agentgym_r1.error import ConfigError, DependencyNotInstalled

LORA_EXTRA = 'pip install "agentgym-r1[lora]"'
# the module classes peft 0.21's LoRA can wrap (peft/tuners/lora/model.py LoraModel._create_new_module dispatchers)
LORA_LAYERS = ("Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "Conv1D", "MultiheadAttention")


@dataclass
class LoraArguments:
    r"""
    LoRA fields both trainers' configs share, named as TRL's [`~trl.ModelConfig`] names them.

    Parameters:
        > Parameters that control LoRA (PEFT)

        use_peft (`bool`, *optional*, defaults to `False`):
            Train a LoRA adapter on the frozen model instead of every weight (needs `agentgym-r1[lora]`).
        lora_r (`int`, *optional*, defaults to `16`):
            The adapter's rank.
        lora_alpha (`int`, *optional*, defaults to `32`):
            The adapter's scale is `lora_alpha / lora_r`.
        lora_dropout (`float`, *optional*, defaults to `0.05`):
            Dropout on the adapter's input.
        lora_target_modules (`list[str]`, *optional*):
            Names (or name suffixes) of the modules to adapt, or `all-linear`. Defaults to peft's choice for the
            model type (e.g. `q_proj`, `v_proj` for Qwen2).
        lora_task_type (`str`, *optional*, defaults to `"CAUSAL_LM"`):
            peft's task type; the policy is a causal LM, so only `CAUSAL_LM`.
        load_in_4bit (`bool`, *optional*, defaults to `False`):
            QLoRA: load the frozen base in 4 bits with bitsandbytes (CUDA only).
        load_in_8bit (`bool`, *optional*, defaults to `False`):
            Load the frozen base in 8 bits with bitsandbytes (CUDA only).
    """

    use_peft: bool = field(default=False, metadata={"help": "train a LoRA adapter on the frozen model"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (the scale is lora_alpha / lora_r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the adapter's input"})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={"help": "module names (or suffixes) to adapt, or all-linear (default: peft's for the model type)"},
    )
    lora_task_type: str = field(default="CAUSAL_LM", metadata={"help": "peft task type: CAUSAL_LM"})
    load_in_4bit: bool = field(default=False, metadata={"help": "QLoRA: 4-bit frozen base (bitsandbytes, CUDA)"})
    load_in_8bit: bool = field(default=False, metadata={"help": "8-bit frozen base (bitsandbytes, CUDA)"})

    def _check_lora(self) -> None:
        """After :func:`~agentgym_r1.trainers.limits.check_fields` (ranges): the target list's shape, peft installed,
        and a quantized base only where bitsandbytes runs."""
        targets = self.lora_target_modules
        if targets is not None:
            if isinstance(targets, str):
                targets = [targets]
            if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
                raise ConfigError(
                    f"lora_target_modules={self.lora_target_modules!r}: give a list of module names, e.g. "
                    "[q_proj, v_proj], or all-linear."
                )
            # TRL's ModelConfig turns a one-element list into a string, which peft reads as a regex over the whole
            # module path; only all-linear is kept as a string here, so [q_proj] keeps meaning "modules named q_proj"
            self.lora_target_modules = "all-linear" if targets == ["all-linear"] else targets
            if not self.use_peft:
                raise ConfigError(
                    f"lora_target_modules={self.lora_target_modules!r} with use_peft=false: no adapter would be "
                    "trained. Set use_peft: true, or leave lora_target_modules out to train every weight."
                )
        quantized = [name for name in ("load_in_4bit", "load_in_8bit") if getattr(self, name)]
        if len(quantized) == 2:
            raise ConfigError("load_in_4bit=True and load_in_8bit=True: choose one precision for the base.")
        if quantized and not self.use_peft:
            raise ConfigError(
                f"{quantized[0]}=True with use_peft=false: a quantized base cannot be trained in full. Set "
                "use_peft: true (QLoRA), or leave the base unquantized."
            )
        if self.use_peft:
            require_peft()
        if quantized:
            check_quantization(quantized[0], bool(getattr(self, "use_cpu", False)))

    def lora_config(self) -> Any:
        """The ``peft.LoraConfig`` of these fields (TRL 1.16 ``trl.trainer.utils.get_peft_config``), or ``None``."""
        if not self.use_peft:
            return None
        from peft import LoraConfig

        return LoraConfig(
            task_type=self.lora_task_type,
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=self.lora_target_modules,
            bias="none",
        )

    def quantization_kwargs(self) -> dict[str, Any]:
        """``from_pretrained`` keyword arguments for a quantized base (TRL's ``get_quantization_config``), or none."""
        if not (self.load_in_4bit or self.load_in_8bit):
            return {}
        import torch
        from transformers import BitsAndBytesConfig

        if self.load_in_8bit:
            return {"quantization_config": BitsAndBytesConfig(load_in_8bit=True)}
        return {
            "quantization_config": BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
            )
        }


def require_peft() -> None:
    if importlib.util.find_spec("peft") is None:
        raise DependencyNotInstalled(
            f"use_peft=True needs the peft package, which is not installed. Install it with {LORA_EXTRA} (or pip "
            "install peft), or set use_peft: false to train every weight."
        )


def check_quantization(name: str, use_cpu: bool) -> None:
    """A 4/8-bit base needs bitsandbytes and a CUDA device (its quantized matmuls have no CPU kernels here)."""
    import torch

    if use_cpu or not torch.cuda.is_available():
        raise ConfigError(
            f"{name}=True needs a CUDA device: bitsandbytes quantizes the base with CUDA kernels (got "
            f"{'use_cpu=True' if use_cpu else 'no CUDA device'}). On CPU train a LoRA adapter on the unquantized "
            f"base (use_peft: true, {name}: false)."
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise DependencyNotInstalled(
            f"{name}=True needs the bitsandbytes package, which is not installed. Install it with pip install "
            f"bitsandbytes, or set {name}: false."
        )


def lora_module_names(model: Any) -> list[str]:
    """The distinct last names of the modules LoRA can adapt in ``model`` (what ``lora_target_modules`` lists)."""
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if type(m).__name__ in LORA_LAYERS and name}
    return sorted(names)


def check_target_modules(model: Any, targets: Any) -> None:
    """Every ``lora_target_modules`` entry names a module of ``model`` that LoRA can wrap (peft's own match: the
    module's full name, or a suffix after a dot; a string other than ``all-linear`` is a regex over the full name,
    peft 0.21 ``check_target_module_exists``); else a :class:`ConfigError` listing the model's names."""
    if targets is None or targets == "all-linear":
        return
    full = [name for name, m in model.named_modules() if type(m).__name__ in LORA_LAYERS and name]

    def found(t: str) -> bool:
        if isinstance(targets, str):
            return any(re.fullmatch(t, name) for name in full)
        return any(name == t or name.endswith("." + t) for name in full)

    missing = [t for t in ([targets] if isinstance(targets, str) else targets) if not found(t)]
    if missing:
        raise ConfigError(
            f"lora_target_modules={targets!r}: {', '.join(repr(t) for t in missing)} matches no module of the model "
            f"that LoRA can adapt. The model's are: {', '.join(lora_module_names(model))} (or all-linear)."
        )


def check_targets_of_model_dir(args: Any) -> None:
    """:func:`check_target_modules` against ``args.model_init`` built on the meta device from its config (no weight
    is read), so that a misspelt target fails before the model loads."""
    if not getattr(args, "use_peft", False) or args.lora_target_modules in (None, "all-linear"):
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.model_init))
    check_target_modules(model, args.lora_target_modules)


def is_peft_model(model: Any) -> bool:
    return importlib.util.find_spec("peft") is not None and _is_peft(model)


def _is_peft(model: Any) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def base_model_context(model: Any) -> Any:
    """The reference policy of an adapted ``model``: its base with the adapter disabled (as TRL computes the
    reference with a new adapter); a no-op for a model without an adapter."""
    return model.disable_adapter() if is_peft_model(model) else nullcontext()


def merged_parameters(model: Any) -> Iterator[tuple[str, Any]]:
    """``model``'s weights under the names of the plain model, each adapted weight with its adapter's update added
    (``base + get_delta_weight``): what a vLLM engine loads to generate with the current adapter. Out of place, so
    the frozen base stays bit-identical (TRL's ``VLLMGeneration._iter_named_params`` merges in place and unmerges,
    which rounds the base each sync). The names are TRL's: ``base_model.model.`` and ``.base_layer`` removed, the
    adapter's own tensors skipped."""
    if not is_peft_model(model):
        yield from ((name, p.detach()) for name, p in model.named_parameters())
        return
    from peft.tuners.tuners_utils import BaseTunerLayer

    modules = dict(model.named_modules())
    prefix = model.base_model.prefix  # "lora_"
    for name, p in model.named_parameters():
        if prefix in name or "original_module" in name:
            continue
        weight = p.detach()
        layer = modules.get(name.removesuffix(".base_layer.weight"))
        if name.endswith(".base_layer.weight") and isinstance(layer, BaseTunerLayer) and not layer.merged:
            for adapter in layer.active_adapters:
                weight = weight + layer.get_delta_weight(adapter).to(weight.dtype)
        plain = name.removeprefix("base_model.model.").replace(".base_layer", "")
        yield plain.replace("modules_to_save.default.", ""), weight


def adapt_policy_and_critic(
    policy: Any, critic: Any, config: Any, *, autocast_adapter_dtype: bool = True
) -> tuple[Any, Any]:
    """PPO with LoRA: the policy gets the adapter ``config`` on its frozen base; the critic (its own copy of the
    base's decoder, made before) gets an adapter of its own with the same rank and targets, its base frozen too.
    Policy and critic then share no trainable tensor: the policy loss moves the policy's adapter, the value loss the
    critic's adapter and the value head. ``autocast_adapter_dtype``: peft's flag (its default, true, makes a 16-bit
    base's adapter fp32); see :func:`adapter_keeps_base_dtype`."""
    from peft import get_peft_model

    check_target_modules(policy, config.target_modules)
    critic_config = type(config)(**{**config.to_dict(), "task_type": None})
    flag = {"autocast_adapter_dtype": autocast_adapter_dtype}
    return get_peft_model(policy, config, **flag), get_peft_model(critic, critic_config, **flag)


def adapter_keeps_base_dtype(args: Any) -> bool:
    """Whether the adapter must keep the base's dtype: under DeepSpeed ZeRO-3, whose coalesced all-gather allocates
    its buffer in the dtype of the first parameter, so a bf16 base with fp32 adapters fails at the first optimizer
    step (TRL 1.16 ``GRPOTrainer.__init__`` passes ``autocast_adapter_dtype=False`` there for the same reason:
    trl#6089, DeepSpeed#8072)."""
    from agentgym_r1.trainers.sharding import requested

    return requested(args).zero == 3


def trainable_state(module: Any) -> dict[str, Any]:
    """The tensors of ``module`` that train (an adapted module: its adapter; a plain one: every tensor)."""
    if is_peft_model(module):
        return {n: p.detach() for n, p in module.named_parameters() if p.requires_grad}
    return module.state_dict()


def count_parameters(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts of ``model``."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def trainer_peft_config(args: Any, model: Any) -> Any:
    """The ``LoraConfig`` of ``args`` (``None`` without ``use_peft``), its targets checked against ``model``."""
    config = args.lora_config() if hasattr(args, "lora_config") else None
    if config is not None:
        check_target_modules(model, config.target_modules)
    return config
