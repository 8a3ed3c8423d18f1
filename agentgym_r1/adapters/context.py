"""What the model sees at each turn: the full history, the last k turns, or a summary.

The full history is built from token ids as the episode goes (the prompt, each turn's sampled ids, the env suffix
after it), so the sequence a trainer sees is exactly the one the model generated from. The other policies re-render
a chosen list of messages through the chat template at each turn; their training rows are step-level (each turn's
prompt is its own context), since no single sequence holds what the model saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_r1.error import ConfigError

Message = dict[str, Any]
Summariser = Callable[[list[Message]], list[Message]]


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """``kind`` is ``"full"``, ``"last_k"`` (keep the messages before the first agent turn and the last ``k`` turns)
    or ``"summary"`` (``summariser(messages) -> messages``, given the whole history at each turn)."""

    kind: str = "full"
    k: int = 2
    summariser: Summariser | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("full", "last_k", "summary"):
            raise ConfigError(f"context kind must be 'full', 'last_k' or 'summary', got {self.kind!r}")
        if self.kind == "last_k" and self.k < 0:
            raise ConfigError(f"last_k needs k >= 0, got {self.k}")
        if self.kind == "summary" and not callable(self.summariser):
            raise ConfigError("context kind 'summary' needs a summariser: a callable taking and returning messages")

    @property
    def full(self) -> bool:
        return self.kind == "full"

    def messages(self, history: Sequence[Message]) -> list[Message]:
        """The messages to render for the next turn, from the history so far."""
        history = [dict(m) for m in history]
        if self.kind == "full":
            return history
        if self.kind == "summary":
            assert self.summariser is not None
            out = self.summariser(history)
            if not isinstance(out, list) or not all(isinstance(m, dict) and "role" in m for m in out):
                raise ConfigError("the summariser must return a list of {'role': ..., 'content': ...} messages")
            return out
        return last_k_turns(history, self.k)


def last_k_turns(history: Sequence[Message], k: int) -> list[Message]:
    """The messages before the first assistant message (system, task), then the last ``k`` turns, each an assistant
    message with the env messages after it."""
    starts = [i for i, m in enumerate(history) if m.get("role") == "assistant"]
    if not starts:
        return list(history)
    head = list(history[: starts[0]])
    keep = starts[-k:] if k > 0 else []
    return head + (list(history[keep[0] :]) if keep else [])


def make_context(context: str | int | Summariser | ContextPolicy) -> ContextPolicy:
    """``"full"``, an int k (last k turns), a summariser callable, or a :class:`ContextPolicy`."""
    if isinstance(context, ContextPolicy):
        return context
    if context == "full":
        return ContextPolicy()
    if isinstance(context, int) and not isinstance(context, bool):
        return ContextPolicy("last_k", k=context)
    if callable(context):
        return ContextPolicy("summary", summariser=context)
    raise ConfigError(
        f"context must be 'full', an int (last k turns), a summariser callable or a ContextPolicy; got {context!r}"
    )
