"""The one loader of a local model directory's tokenizer and model, for every caller: the trainers, the leaderboard's
``hf:``/``vllm:`` policies and the mask inspector.

Nothing is downloaded: ``path`` is a directory written by ``save_pretrained``. A library error while reading it is a
:class:`~agentgym_r1.error.ModelFilesError` (a ``ValueError``) that names the field, the path and the fix, with the
library's exception as its cause.

A LoRA adapter directory (peft's ``adapter_config.json`` beside ``adapter_model.safetensors``, as the trainers save
with ``use_peft``) plays on its base: the local directory its ``base_model_name_or_path`` names (as given, or
relative to the adapter directory), the adapter merged in. Its tokenizer is the adapter directory's when saved there,
else the base's. :func:`merge_adapter` writes the merged weights as a plain model directory.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agentgym_r1.error import ModelFilesError, require


def load_tokenizer(path: str, field: str = "model_init") -> Any:
    """The tokenizer of the model directory ``path`` (given as ``field``): its ``tokenizer.json`` as is when there is
    one (``AutoTokenizer`` beside a qwen2 ``config.json`` would rebuild a custom tokenizer as a Qwen2 one and change
    its ids), else ``AutoTokenizer``'s."""
    transformers = require("transformers", "train", "loading a tokenizer")
    base = adapter_base(path, field)
    if base is not None and not _has_tokenizer(path):
        path = base
    try:
        if os.path.exists(os.path.join(path, "tokenizer.json")):
            return transformers.PreTrainedTokenizerFast.from_pretrained(path)
        return transformers.AutoTokenizer.from_pretrained(path)
    except Exception as e:  # tokenizers raises its own Exception subclasses for a damaged tokenizer.json
        raise ModelFilesError(
            f"{field}={path!r}: its tokenizer cannot be loaded ({type(e).__name__}: {e}). "
            "Save the tokenizer again with tokenizer.save_pretrained(path)."
        ) from e


def load_model(path: str, field: str = "model_init", *, device: str | None = None, **kwargs: Any) -> Any:
    """The causal LM of the model directory ``path`` (given as ``field``).

    To train (``device=None``): TRL's ``create_model_from_path`` with ``kwargs`` (``model_init_kwargs``), so float32
    unless ``dtype`` says otherwise (the trainer keeps fp32 master weights; ``bf16: true`` trains under autocast) and
    ``device_map`` chosen by accelerate's state. To play (``device`` given, e.g. ``"cpu"``): transformers'
    ``AutoModelForCausalLM.from_pretrained(path, **kwargs)`` on ``device``, in eval mode.
    """
    if adapter_base(path, field) and device is not None:
        return _load_adapted(path, field, device, **kwargs)
    try:
        if device is None:
            from trl.trainer.utils import create_model_from_path

            return create_model_from_path(path, **kwargs)
        transformers = require("transformers", "train", "loading a model")
        return transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device).eval()
    except (OSError, ValueError, RuntimeError) as e:  # damaged tensor data past a good header, a bad dtype
        given = f" with {field}_kwargs={kwargs!r}" if device is None else ""
        fix = "Save the model again, or fix model_init_kwargs." if device is None else "Save the model again."
        raise ModelFilesError(f"{field}={path!r}{given} cannot be loaded ({type(e).__name__}: {e}). {fix}") from e


ADAPTER_CONFIG = "adapter_config.json"  # peft's CONFIG_NAME


def _has_tokenizer(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, n)) for n in ("tokenizer.json", "tokenizer_config.json"))


def adapter_base(path: str, field: str = "model") -> str | None:
    """The base model directory of the LoRA adapter directory ``path`` (``None``: ``path`` is not an adapter): its
    ``base_model_name_or_path``, as given or relative to ``path``. A base that is not a local model directory is a
    :class:`ModelFilesError` that says which base the adapter needs."""
    config = os.path.join(path, ADAPTER_CONFIG)
    if not os.path.isfile(config):
        return None
    try:
        with open(config, encoding="utf-8") as f:
            base = json.load(f).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as e:
        raise ModelFilesError(
            f"{field}={path!r}: its {ADAPTER_CONFIG} cannot be read ({e}). Save the adapter again."
        ) from e
    for candidate in (base, os.path.join(path, base or "")) if base else ():
        if os.path.isfile(os.path.join(candidate, "config.json")):
            return candidate
    raise ModelFilesError(
        f"{field}={path!r} is a LoRA adapter whose base model {base!r} ({ADAPTER_CONFIG}'s base_model_name_or_path) "
        "is not a local model directory (nothing is downloaded). Put the base model's directory there, or set "
        "base_model_name_or_path in adapter_config.json to the base's local directory."
    )


def _load_adapted(path: str, field: str, device: str, **kwargs: Any) -> Any:
    """The adapter of ``path`` on its base (:func:`adapter_base`), merged, on ``device``, in eval mode."""
    base = adapter_base(path, field)
    assert base is not None
    model = load_model(base, f"{field}'s base model", device="cpu", **kwargs)
    peft = require("peft", "lora", "loading a LoRA adapter")
    try:
        adapted = peft.PeftModel.from_pretrained(model, path)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelFilesError(
            f"{field}={path!r}: the adapter cannot be loaded on its base {base!r} ({type(e).__name__}: {e}). "
            "Save the adapter again, or point base_model_name_or_path at the base it was trained on."
        ) from e
    return adapted.merge_and_unload().to(device).eval()


def merge_adapter(path: str, out: str) -> str:
    """Write the adapter directory ``path`` merged into its base as a plain model directory ``out`` (weights, config
    and tokenizer), which every loader, vLLM included, reads as any model; returns ``out``."""
    if adapter_base(path, "adapter") is None:
        raise ModelFilesError(
            f"adapter={path!r} is not a LoRA adapter directory (no {ADAPTER_CONFIG}). Give the directory a run "
            "with use_peft: true saved (its output_dir or a checkpoint-N)."
        )
    model = load_model(path, "adapter", device="cpu")
    model.save_pretrained(out)
    load_tokenizer(path, "adapter").save_pretrained(out)
    return out
