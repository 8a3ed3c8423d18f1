"""Sharded training through accelerate (FSDP2, DeepSpeed ZeRO): the config check and the weights the rollout
generates with.

What runs where (accelerate 1.15, transformers 5.24, TRL 1.16, torch 2.13):

- FSDP2 (``fsdp_version: 2`` in an accelerate config, or ``fsdp``/``fsdp_config`` in the run config): accelerate
  shards the model with ``fully_shard`` when the trainer prepares it. The rollout engine calls ``generate`` a
  different number of times on each process (episodes end after different numbers of turns), and every forward of
  a sharded module all-gathers its parameters, a collective that would wait forever on a process that has
  finished. So :func:`unwrapped_for_generation` gathers the full weights once per rollout (one ``full_tensor()``
  per parameter, in the same order on every process, as TRL 1.16's ``VLLMGeneration._iter_fsdp2_params`` does
  for its vLLM sync) into a plain replica of the policy built on the meta device, and generation runs on that
  replica with no collective at all; the replica is dropped after the rollout.
- DeepSpeed ZeRO-3: TRL's ``unwrap_model_for_generation`` gathers the parameters once
  (``deepspeed.zero.GatheredParameters``) and removes the hooks for the rollout; ZeRO-2 keeps full parameters on
  every process. ``ds3_gather_for_generation=False`` (generate through the partitioned model, layer by layer) is
  refused, for the reason above. PPO's checkpoints are written from weights ZeRO-3 gathers at save time, so PPO
  under ZeRO-3 needs ``zero3_save_16bit_model`` (refused without it). Asynchronous rollouts (``max_staleness``)
  send the policy's state dict to the generator process, which holds shards under FSDP2 and ZeRO-3: refused there.
- CPU: accelerate 1.15 enables FSDP and DeepSpeed only on GPU-type process groups (``AcceleratorState.__init__``
  sets ``DistributedType.FSDP`` only under ``MULTI_GPU``/``MULTI_XPU``/...; ``ACCELERATE_USE_DEEPSPEED`` is read
  only ``and not cpu``), and ``accelerate launch`` sends a ``use_cpu`` config to its one-process
  ``simple_launcher``. A CPU run with either config would train unsharded DDP replicas while its config says
  sharded, so :func:`check_sharding` refuses it at start, with that reason. (The trainers' FSDP2 path itself is
  tested on 2 CPU processes by setting accelerate's state by hand: ``tests/trainers/dist_shard.py``.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agentgym_r1.error import ConfigError


def _truthy(value: str | None) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Sharding:
    """What a config and the launcher's environment ask for: ``fsdp`` (its version, or ``None``), ``zero`` (the
    DeepSpeed ZeRO stage, ``0`` when DeepSpeed is off, ``-1`` when on with a stage not known before the run) and
    ``zero3_save_16bit`` (ZeRO-3 gathers the full weights when the model is saved:
    ``stage3_gather_16bit_weights_on_model_save``, accelerate's ``zero3_save_16bit_model``)."""

    fsdp: int | None
    zero: int
    zero3_save_16bit: bool = False

    @property
    def shards_weights(self) -> bool:
        """Each process holds only a shard of every weight (FSDP, ZeRO-3); ZeRO-2 keeps the full weights."""
        return self.fsdp is not None or self.zero == 3

    @property
    def any(self) -> bool:
        return self.fsdp is not None or self.zero != 0

    @property
    def name(self) -> str:
        if self.fsdp is not None:
            return f"FSDP (fsdp_version {self.fsdp})"
        return "DeepSpeed" + (f" ZeRO-{self.zero}" if self.zero > 0 else "")


def requested(args: Any) -> Sharding:
    """The sharding ``args`` (a ``TrainingArguments``) and the environment ``accelerate launch`` set ask for:
    ``ACCELERATE_USE_FSDP``/``FSDP_VERSION`` and ``ACCELERATE_USE_DEEPSPEED``/``ACCELERATE_DEEPSPEED_ZERO_STAGE``/
    ``ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL``/``ACCELERATE_DEEPSPEED_CONFIG_FILE`` (``accelerate/utils/
    launch.py``), or transformers' ``fsdp``/``fsdp_config``/``deepspeed`` fields, whose FSDP version defaults to 2
    (``TrainingArguments._fsdp_plugin_args``) where accelerate's defaults to 1. A DeepSpeed JSON (``deepspeed``, a
    dict or a file, or accelerate's config file) wins over the environment, as in accelerate's ``DeepSpeedPlugin``
    (it fills only the JSON's ``auto`` values from the plugin's fields)."""
    fsdp: int | None = None
    if _truthy(os.environ.get("ACCELERATE_USE_FSDP")):
        fsdp = int(os.environ.get("FSDP_VERSION", "1"))
    elif getattr(args, "fsdp", None):
        config = getattr(args, "fsdp_config", None) or {}
        config = config if isinstance(config, dict) else {}
        fsdp = int(config.get("version", config.get("fsdp_version", 2)))
    if not (getattr(args, "deepspeed", None) or _truthy(os.environ.get("ACCELERATE_USE_DEEPSPEED"))):
        return Sharding(fsdp, 0)
    zero = int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "-1"))
    save16 = _truthy(os.environ.get("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"))
    config = _deepspeed_json(args)
    if config is not None:
        zero_config = config.get("zero_optimization", {})
        stage = zero_config.get("stage", "auto")
        zero = int(stage) if stage != "auto" else zero
        gather = zero_config.get(
            "stage3_gather_16bit_weights_on_model_save", zero_config.get("stage3_gather_fp16_weights_on_model_save")
        )
        save16 = save16 if gather == "auto" else bool(gather)
    return Sharding(fsdp, zero, save16)


def _deepspeed_json(args: Any) -> dict[str, Any] | None:
    """The DeepSpeed config given as JSON: ``args.deepspeed`` (a dict, or the path of a file) or the file accelerate's
    config names (``ACCELERATE_DEEPSPEED_CONFIG_FILE``); ``None`` when there is none, or it cannot be read here
    (transformers then reports it)."""
    given = getattr(args, "deepspeed", None) or os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
    if isinstance(given, dict):
        return given
    if not isinstance(given, str) or given == "none":
        return None
    import json

    try:
        with open(given, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def check_sharding(
    args: Any, *, generates_with_transformers: bool, ppo_vllm: bool = False, saves_critic: bool = False
) -> None:
    """Refuse, before any work, a sharded config the trainer cannot serve; each message says why and the fix.
    ``generates_with_transformers``: rollouts generate with the policy (not vLLM); ``ppo_vllm``: PPO's colocated
    engine, synced in process from the policy's own parameters; ``saves_critic``: PPO, whose checkpoints hold the
    critic's weights beside the policy."""
    want = requested(args)
    if not want.any:
        return
    if getattr(args, "use_cpu", False) or not _has_cuda():
        raise ConfigError(
            f"{want.name} on CPU (use_cpu={getattr(args, 'use_cpu', False)}, CUDA available: {_has_cuda()}): "
            "accelerate 1.15 shards only on GPU-type process groups (AcceleratorState enables FSDP under MULTI_GPU "
            "and its kin, and reads ACCELERATE_USE_DEEPSPEED only when not on CPU; `accelerate launch` runs a "
            "use_cpu config as one process), so this run would train an unsharded copy on every process while its "
            "config says sharded. On CPU drop the FSDP/DeepSpeed settings (2 CPU processes: torchrun "
            "--nproc_per_node 2 with use_cpu: true, which is DDP over gloo); shard on GPUs (configs/accelerate_*.yaml)."
        )
    if want.fsdp is not None and want.fsdp != 2 and (generates_with_transformers or ppo_vllm):
        raise ConfigError(
            f"fsdp_version={want.fsdp}: the rollout gathers the sharded weights for generation through FSDP2's "
            "DTensors (one full_tensor() per parameter); FSDP1's flat parameters are not gathered here. Set "
            "fsdp_version: 2 in the accelerate config (or fsdp_config: {version: 2})."
        )
    if want.zero == 3 and generates_with_transformers and not getattr(args, "ds3_gather_for_generation", True):
        raise ConfigError(
            "ds3_gather_for_generation=False under DeepSpeed ZeRO-3: every process plays episodes of different "
            "lengths, so it calls generate a different number of times, and a forward through partitioned "
            "parameters gathers them layer by layer with the other processes, which would wait forever on one that "
            "has finished. Set ds3_gather_for_generation: true (the full weights are gathered once per rollout)."
        )
    if ppo_vllm and want.shards_weights:
        raise ConfigError(
            f"PPO with use_vllm=True under {want.name}: its colocated engine is loaded in process from the policy's "
            "own parameters, which are shards here. Use GRPO with use_vllm (TRL gathers the shards for its engine), "
            "or use_vllm=false (the rollout then generates on the gathered weights), or ZeRO-2."
        )
    staleness = getattr(args, "max_staleness", 0) or 0
    if staleness and want.shards_weights:
        raise ConfigError(
            f"max_staleness={staleness} under {want.name}: after every update the generator process is sent the "
            "policy's state dict (async_rollouts.PushWeights), which holds this process's shards here (FSDP2's "
            "DTensors; ZeRO-3's partitioned parameters are empty tensors outside a forward), not the weights. Set "
            "max_staleness: 0, or train without sharded weights (unsharded, or DeepSpeed ZeRO-2)."
        )
    if saves_critic and want.zero == 3 and not want.zero3_save_16bit:
        raise ConfigError(
            "PPO under DeepSpeed ZeRO-3 without zero3_save_16bit_model: saving a checkpoint then finds no gathered "
            "weights (transformers' Trainer.save_model falls back to DeepSpeed's own checkpoint), and the policy "
            "directory and critic.pt beside it would hold the partitioned parameters, empty tensors. Set "
            "zero3_save_16bit_model: true in the accelerate config (ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL=true, "
            "or stage3_gather_16bit_weights_on_model_save: true in the DeepSpeed JSON), as configs/accelerate_zero3"
            ".yaml does."
        )
    if want.zero != 0:
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            raise ConfigError(f"{want.name} needs the deepspeed package: pip install deepspeed (on a CUDA machine).")


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def fsdp2_enabled(accelerator: Any) -> bool:
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    return plugin is not None and getattr(plugin, "fsdp_version", 1) == 2


def full_state(module: Any) -> dict[str, Any]:
    """``module``'s state dict with every FSDP2 shard (a ``DTensor``) gathered into a full tensor: a collective per
    sharded tensor, in ``state_dict`` order, so every process must call it (they do: once per rollout)."""
    from torch.distributed.tensor import DTensor

    return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in module.state_dict().items()}


def original_class(module: Any) -> type:
    """The class ``fully_shard`` started from: it swaps a module's class for ``FSDP<Class>``, a subclass of
    ``FSDPModule`` and the original (``torch/distributed/fsdp/_fully_shard/_fully_shard.py``)."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(module).__mro__ if not issubclass(c, FSDPModule))


def plain_copy(module: Any, state: dict[str, Any]) -> Any:
    """A plain (unsharded, hook-free) copy of the causal LM ``module`` holding the full weights ``state``: built from
    its config on the meta device, given ``state`` (``assign=True``) and the module's buffers (non-persistent ones,
    rotary frequencies say, are not in a state dict; FSDP2 leaves buffers whole), tied weights tied again. Touches
    no shard of ``module``, so one process may make it alone (PPO's ``_save`` on the main process)."""
    import torch

    with torch.device("meta"):
        copy = original_class(module)(module.config)
    copy.load_state_dict(state, strict=False, assign=True)
    for name, buffer in module.named_buffers():
        owner, _, leaf = name.rpartition(".")
        setattr(copy.get_submodule(owner) if owner else copy, leaf, buffer)
    if hasattr(copy, "tie_weights"):
        copy.tie_weights()  # an output embedding the state dict left out (tied) shares the input's again
    left = [n for n, p in copy.named_parameters() if p.is_meta]
    assert not left, f"weights missing from the gathered state dict: {left}"
    if getattr(module, "generation_config", None) is not None:
        copy.generation_config = module.generation_config
    return copy


def full_replica(module: Any) -> Any:
    """:func:`plain_copy` of the FSDP2-sharded causal LM ``module`` with its shards gathered (:func:`full_state`: a
    collective every process joins)."""
    return plain_copy(module, full_state(module)).eval()


@contextmanager
def unwrapped_for_generation(
    model: Any, accelerator: Any, gather_deepspeed3_params: bool = True, select: Any = None
) -> Iterator[Any]:
    """The causal LM to generate with during a rollout: under FSDP2 a :func:`full_replica` of the policy (``select``
    picks it from the unwrapped model, PPO's policy beside its critic); otherwise TRL's
    ``unwrap_model_for_generation`` (DDP unwrapped; ZeRO-3 parameters gathered once)."""
    if fsdp2_enabled(accelerator):
        unwrapped = accelerator.unwrap_model(model)
        replica = full_replica(select(unwrapped) if select else unwrapped)
        try:
            yield replica
        finally:
            del replica
        return
    from trl.models import unwrap_model_for_generation

    with unwrap_model_for_generation(model, accelerator, gather_deepspeed3_params=gather_deepspeed3_params) as m:
        yield select(m) if select else m
