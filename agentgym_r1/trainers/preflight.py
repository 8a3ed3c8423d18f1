"""What a training run checks after its config parses and before it loads a model: the env (a registered id whose
kwargs make it and whose first reset works), the output directory, the model directory's files (config.json,
weights, tokenizer), the checkpoint to resume from, and, once the tokenizer is loaded, that the first prompt fits
``max_prompt_tokens``.

Each failure is one named error (:class:`ConfigError`, :class:`ModelFilesError`) that says the field, the path and
what is wrong, with the library's exception as its cause, instead of a safetensors, transformers or tokenizers
traceback minutes into a run, after the model was loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentgym_r1.adapters.loading import load_model, load_tokenizer
from agentgym_r1.error import ConfigError, ModelFilesError
from agentgym_r1.trainers.common import check_env_builds
from agentgym_r1.trainers.lora import check_targets_of_model_dir
from agentgym_r1.trainers.sampling_config import check_levels

SAFE_WEIGHTS, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
TORCH_WEIGHTS, TORCH_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"  # peft's file names
TRAINER_STATE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME: Trainer.train reads it on every resume


def preflight(args: Any) -> None:
    """Every check that needs no tokenizer and no model, cheapest first (see the module docstring)."""
    check_output_dir(args.output_dir)
    check_env_builds(args.env_id, args.env_kwargs)
    check_levels(args)
    check_model_dir(args.model_init)
    check_targets_of_model_dir(args)
    check_resume(args)


def check_output_dir(path: str) -> None:
    """``output_dir`` is a directory or can be made one: not a file, not under a file, its parent writable."""
    target = Path(path).absolute()
    if target.exists() and not target.is_dir():
        raise ConfigError(
            f"output_dir={path!r} is a file, not a directory. Give a directory for checkpoints and "
            "the final model (it is made if missing)."
        )
    for parent in (target, *target.parents):
        if not parent.exists():
            continue
        if not parent.is_dir():
            raise ConfigError(
                f"output_dir={path!r} is under {str(parent)!r}, which is a file, so the directory "
                "cannot be made. Give a path under a directory."
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(
                f"output_dir={path!r}: {str(parent)!r} is not writable, so checkpoints could not be "
                "saved. Give a directory you can write to."
            )
        return


def check_model_dir(path: str | None, field: str = "model_init") -> None:
    """A local model directory: a readable ``config.json`` with a ``model_type``, weights whose safetensors headers
    read and cover their files, and a fast tokenizer (``tokenizer.json``) beside them."""
    if not path:
        raise ConfigError(
            f"{field} is not set: give a local model directory (with its tokenizer), e.g. the SFT "
            "checkpoint written by benchmarks/train_gsm8k_proof.py"
        )
    if os.path.isfile(os.path.join(path, ADAPTER_CONFIG)) and not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(
            f"{field}={path!r} is a LoRA adapter directory, not a model: merge it into its base first "
            f"(agentgym-r1 adapter {path} --merge MERGED_DIR) and give {field}=MERGED_DIR."
        )
    if not os.path.isdir(path) or not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(
            f"{field}={path!r} is not a local model directory (no config.json there). Give the "
            "directory a model was saved to with save_pretrained, tokenizer files beside it."
        )
    check_model_config(path, field)
    check_weights(path, field)
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        raise ModelFilesError(
            f"{field}={path!r} has no tokenizer.json: the trainers read the model's fast tokenizer from the model "
            "directory. Save the model's tokenizer there with tokenizer.save_pretrained(path)."
        )


def check_model_config(path: str, field: str) -> None:
    """``config.json`` read by transformers' ``AutoConfig`` (no weights are read)."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(path)
    except Exception as e:  # OSError (not JSON), ValueError (no model_type), others for odd JSON shapes
        raise ModelFilesError(
            f"{field}={path!r}: its config.json cannot be read as a model config ({e}). "
            "Save the model again with save_pretrained, or fix config.json."
        ) from e


def check_weights(path: str, field: str) -> None:
    """The weight files transformers would load from ``path``: every safetensors file (or shard of the index)
    present, not empty, with a header that parses and covers the file; a ``.bin`` present and not empty."""
    shards = _listed_shards(path, field)
    if shards is None:
        for name in (SAFE_WEIGHTS, TORCH_WEIGHTS):
            if os.path.isfile(os.path.join(path, name)):
                shards = [name]
                break
        else:
            raise ModelFilesError(
                f"{field}={path!r} has no weights ({SAFE_WEIGHTS} or a sharded index). Save the "
                "model there with save_pretrained."
            )
    for name in shards:
        check_weight_file(os.path.join(path, name), field)


def _listed_shards(path: str, field: str) -> list[str] | None:
    for index in (SAFE_INDEX, TORCH_INDEX):
        file = os.path.join(path, index)
        if os.path.isfile(file):
            try:
                with open(file, encoding="utf-8") as f:
                    return sorted(set(json.load(f)["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise ModelFilesError(
                    f"{field}={path!r}: the shard index {index} cannot be read ({e}). Save the "
                    "model again with save_pretrained."
                ) from e
    return None


def check_weight_file(file: str, field: str) -> None:
    """One weight file. A safetensors header is read with ``safetensors.safe_open``, which checks that the header
    parses and that its tensors' offsets cover the file exactly (a truncated download fails here)."""
    if not os.path.isfile(file):
        raise ModelFilesError(
            f"{field}: the weight file {file!r} is missing. Copy the whole model directory, or "
            "save the model again with save_pretrained."
        )
    if os.path.getsize(file) == 0:
        raise ModelFilesError(f"{field}: the weight file {file!r} is empty (0 bytes). Copy or save the model again.")
    if not file.endswith(".safetensors"):
        return
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(file, framework="pt") as weights:
            weights.keys()
    except (SafetensorError, OSError) as e:
        raise ModelFilesError(
            f"{field}: the weight file {file!r} is damaged or truncated ({e}). Copy or save the model again."
        ) from e


def check_resume(args: Any) -> None:
    """``resume_from_checkpoint``: ``true`` (the last ``checkpoint-N`` in ``output_dir``) or a checkpoint directory
    holding the trainer state and readable weights (PPO: ``critic.pt`` too)."""
    resume = args.resume_from_checkpoint
    if resume is None or resume is False:
        return
    if resume is True:
        from transformers.trainer_utils import get_last_checkpoint

        resume = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
        if resume is None:
            raise ConfigError(
                f"resume_from_checkpoint=true but output_dir={args.output_dir!r} holds no "
                "checkpoint-N directory. Give the checkpoint's path, or leave resume_from_checkpoint "
                "unset to start from model_init."
            )
    if not os.path.isdir(resume):
        raise ConfigError(
            f"resume_from_checkpoint={resume!r}: no such directory. Give a checkpoint directory "
            "(output_dir/checkpoint-N), or leave it unset to start from model_init."
        )
    needed = [TRAINER_STATE, *getattr(args, "checkpoint_files", ())]
    missing = [name for name in needed if not os.path.isfile(os.path.join(resume, name))]
    if missing:
        raise ModelFilesError(
            f"resume_from_checkpoint={resume!r} is not a checkpoint of this trainer: "
            f"{', '.join(missing)} missing. Give a checkpoint-N directory that the trainer saved."
        )
    if os.path.isfile(os.path.join(resume, ADAPTER_CONFIG)):  # a LoRA run's checkpoint holds the adapter only
        check_weight_file(os.path.join(resume, ADAPTER_WEIGHTS), "resume_from_checkpoint")
    elif not (args.deepspeed or args.fsdp):  # sharded checkpoints are read by their own engines
        check_weights(resume, "resume_from_checkpoint")


def build_model_and_tokenizer(args: Any) -> tuple[Any, Any]:
    """The tokenizer and the model of ``args.model_init`` (:func:`~agentgym_r1.adapters.loading.load_model` with
    ``model_init_kwargs``), its files checked first."""
    check_model_dir(args.model_init)
    tokenizer = load_tokenizer(args.model_init)
    return load_model(args.model_init, **dict(getattr(args, "model_init_kwargs", None) or {})), tokenizer


def check_prompt_fits(args: Any, tokenizer: Any) -> None:
    """The first task's prompt (reset seed 0, rendered with the chat template as the rollout engine renders it)
    fits ``max_prompt_tokens``; a budget below it would make every such episode a failed or cut-short row."""
    from agentgym_r1.adapters import ChatTokenizer
    from agentgym_r1.adapters.env_backends import EnvCall, EnvHost
    from agentgym_r1.adapters.native import resolve_env_kwargs

    chat = ChatTokenizer(tokenizer)
    host = EnvHost()
    try:
        reply = host.call(EnvCall(0, None, args.env_id, resolve_env_kwargs(args.env_kwargs, chat), 0, None))
    finally:
        host.close()
    if reply.error is not None:
        raise ConfigError(
            f"env_id={args.env_id!r} with env_kwargs={args.env_kwargs!r}: the first reset failed "
            f"({reply.error}). Fix the env's options."
        )
    messages = reply.messages if reply.messages is not None else [{"role": "user", "content": reply.obs}]
    tokens = len(chat.prompt_ids(messages))
    if tokens > args.max_prompt_tokens:
        raise ConfigError(
            f"max_prompt_tokens={args.max_prompt_tokens} is below the first prompt of {args.env_id} "
            f"({tokens} tokens with this tokenizer's chat template). Raise max_prompt_tokens to at "
            f"least {tokens} (with room for longer tasks), or shorten the env's system prompt."
        )
