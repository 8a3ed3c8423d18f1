"""Loading datasets from the Hugging Face hub, with one error for every way it can be out of reach."""

from __future__ import annotations

import os
from typing import Any

from agentgym_r1.error import DataSourceUnavailableError, require


def load_hf_dataset(name: str, config: str | None, split: str, *, feature: str, alternatives: str) -> Any:
    """``datasets.load_dataset(name, config, split=split)``; offline and not cached (or refused by the hub), a
    :class:`DataSourceUnavailableError` that names the ``alternatives``. ``feature`` names the caller in the error
    raised when ``datasets`` is missing."""
    datasets = require("datasets", "hf", feature)
    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as e:  # offline, not cached, or the hub refused
        offline = os.environ.get("HF_DATASETS_OFFLINE") or os.environ.get("HF_HUB_OFFLINE")
        where = f"{name!r} ({config}, split {split!r})" if config else f"{name!r} (split {split!r})"
        raise DataSourceUnavailableError(
            f"could not load {where} from Hugging Face ({type(e).__name__}: {str(e)[:200]})"
            f"{'; offline mode is set' if offline else ''}. It is downloaded and cached on first use online. "
            f"Alternatives: {alternatives}."
        ) from e
