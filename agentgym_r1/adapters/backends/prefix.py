"""Key/value reuse across the turns of a rollout for the transformers backend.

A multi-turn rollout asks for turn ``t + 1`` of each live episode with the context of turn ``t`` extended by what the
episode sampled and the env's reply. Without reuse, ``generate`` runs the model over the whole context again every
turn (its prefill); on a small model on CPU that prefill is most of a rollout's time. :class:`PrefixCache` keeps the
``DynamicCache`` ``generate`` returns and, on the next call, picks each new context's row out of it and feeds only the
tokens past what is cached, as vLLM's automatic prefix caching does across requests.

The kept rows are not tight: a row's cache holds its left padding, the context, the sampled tokens but the last
(``generate`` samples it without feeding it), then pads fed after the row stopped while others went on. Those positions
are masked out of the next call with a 0 in the 2-D attention mask, and the new tokens follow, left-padded to the
longest. This relies on two behaviours of transformers (5.x, ``generation/utils.py``):

- ``GenerationMixin._prepare_position_ids_for_generation`` derives positions from the attention mask
  (``cumsum - 1``), so a masked position does not count and the new tokens get the positions a fresh prefill would
  give them (the cached keys kept theirs, computed the same way);
- ``GenerationMixin._prefill``, given a cache and ``input_ids`` as long as the mask, feeds only
  ``input_ids[:, cache_length:]``.

Reuse holds only while the weights do not change, so a cache lives inside :meth:`PrefixCache.session` (the rollout
engine opens one per rollout) and is dropped when it closes. Any call it cannot serve exactly (a context that extends
no kept row, a cache that is not plain full attention, a kept width past twice the longest context) runs the usual
full prefill, so reuse changes speed, never which call succeeds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agentgym_r1.adapters.records import pad_rows


@dataclass(slots=True)
class _Kept:
    """The cache of the last call: its ``DynamicCache``, which positions of each row hold a token (``valid``,
    ``[rows, length]`` bool) and those tokens' ids per row (``prefixes``)."""

    cache: Any
    valid: Any
    prefixes: list[list[int]]


@dataclass(slots=True)
class Reuse:
    """A call served from the cache: the ``generate`` inputs (full-width ids and mask, the cache of the chosen rows)."""

    input_ids: Any
    attention_mask: Any
    cache: Any


class PrefixCache:
    """Keeps the last ``generate`` call's cache inside a :meth:`session`; see the module docstring."""

    def __init__(self) -> None:
        self.active = False
        self.kept: _Kept | None = None
        self.reused = 0  # calls served from the cache, and tokens they did not prefill again (the tests read them)
        self.saved_tokens = 0

    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep caches between calls until the block ends (the weights must not change inside it)."""
        self.active, self.kept = True, None
        try:
            yield
        finally:
            self.active, self.kept = False, None

    def plan(self, contexts: Sequence[Sequence[int]], pad: int, device: Any) -> Reuse | None:
        """The inputs that continue the kept cache for ``contexts``, or ``None`` for a full prefill."""
        import torch

        kept = self.kept
        if kept is None:
            return None
        rows = _match(kept.prefixes, contexts)
        if rows is None:
            return None
        fresh = [list(c[len(kept.prefixes[r]) :]) for c, r in zip(contexts, rows, strict=True)]
        width = max(len(f) for f in fresh)
        length = kept.valid.shape[1]
        if length + width > 2 * max(len(c) for c in contexts) + 64:  # too many holes: a tight prefill is cheaper
            return None
        index = torch.tensor(rows, device=kept.valid.device)
        self.kept = None  # the cache goes to this call (selected in place): a call that fails leaves nothing behind
        kept.cache.batch_select_indices(index)
        ids, mask = left_pad(fresh, pad, device, length + width)  # the cached positions' ids are never fed
        self.reused += 1
        self.saved_tokens += sum(len(kept.prefixes[r]) for r in rows)
        return Reuse(ids, torch.cat([kept.valid[index].to(device).long(), mask[:, length:]], dim=1), kept.cache)

    def keep(
        self, cache: Any, attention_mask: Any, contexts: Sequence[Sequence[int]], sampled: Sequence[Sequence[int]]
    ) -> None:
        """Keep what the call that fed ``attention_mask`` (its full width) left in ``cache``; inside a session only."""
        import torch

        self.kept = None
        if not self.active or not _plain(cache, len(contexts)):
            return
        decoded = cache.get_seq_length() - attention_mask.shape[1]  # decode steps that fed a sampled token
        # a row's sampled token k sits at decode position k; all but its last were fed (the last ends the row)
        fed = [min(max(len(s) - 1, 0), decoded) for s in sampled]
        steps = torch.arange(decoded, device=attention_mask.device)[None, :]
        tail = steps < torch.tensor(fed, device=attention_mask.device)[:, None]
        valid = torch.cat([attention_mask.bool(), tail], dim=1)
        prefixes = [[*c, *s[:n]] for c, s, n in zip(contexts, sampled, fed, strict=True)]
        self.kept = _Kept(cache, valid, prefixes)


def left_pad(rows: Sequence[Sequence[int]], pad: int, device: Any, width: int | None = None) -> tuple[Any, Any]:
    """``rows`` left-padded with ``pad`` to ``width`` (default: the longest) as ``generate`` takes them: the ids and
    the attention mask (1 on a row's own tokens)."""
    import torch

    width = max(len(r) for r in rows) if width is None else width
    ids = torch.tensor(pad_rows(rows, pad, left=True, width=width), device=device)
    mask = torch.tensor(pad_rows([[1] * len(r) for r in rows], 0, left=True, width=width), device=device)
    return ids, mask


def _match(prefixes: list[list[int]], contexts: Sequence[Sequence[int]]) -> list[int] | None:
    """For each context, a kept row whose ids are a strict prefix of it (searched from the row after the last match,
    as the engine keeps its episodes in order); ``None`` if one context has none."""
    rows, start, n = [], 0, len(prefixes)
    for context in contexts:
        for k in range(n):
            r = (start + k) % n
            p = prefixes[r]
            if len(p) < len(context) and list(context[: len(p)]) == p:
                rows.append(r)
                start = r + 1
                break
        else:
            return None
    return rows


def _plain(cache: Any, rows: int) -> bool:
    """A ``DynamicCache`` of full-attention layers only, one row per context: the one layout whose rows and positions
    :meth:`plan` can select and mask (sliding-window, linear-attention and quantized layers keep other state; beams or
    several return sequences from a model's ``generation_config`` give other rows)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return (
        type(cache) is DynamicCache
        and bool(cache.layers)
        and all(type(layer) is DynamicLayer and layer.keys.shape[0] == rows for layer in cache.layers)
    )
