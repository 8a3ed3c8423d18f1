"""The one loader of a local model directory's tokenizer and model, for every caller: the trainers, the leaderboard's
``hf:``/``vllm:`` policies and the mask inspector.

Nothing is downloaded: ``path`` is a directory written by ``save_pretrained``. A library error while reading it is a
:class:`~agentgym_r1.error.ModelFilesError` (a ``ValueError``) that names the field, the path and the fix, with the
library's exception as its cause.
"""

from __future__ import annotations

import os
from typing import Any

from agentgym_r1.error import ModelFilesError, require


def load_tokenizer(path: str, field: str = "model_init") -> Any:
    """The tokenizer of the model directory ``path`` (given as ``field``): its ``tokenizer.json`` as is when there is
    one (``AutoTokenizer`` beside a qwen2 ``config.json`` would rebuild a custom tokenizer as a Qwen2 one and change
    its ids), else ``AutoTokenizer``'s."""
    transformers = require("transformers", "train", "loading a tokenizer")
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
