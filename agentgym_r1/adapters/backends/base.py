"""The interface of a generation backend, and the stop rules every backend applies the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from agentgym_r1.adapters.records import FinishReason
from agentgym_r1.error import ConfigError

DEFAULT_STOP_STRINGS = ("</tool_call>", "</answer>", "</search>")


@dataclass(slots=True)
class SamplingParams:
    """How to sample one turn.

    ``stop`` strings end a turn right after the token that completes them (the token is kept as sampled);
    end-of-turn token ids come from the :class:`~agentgym_r1.adapters.tokenize.ChatTokenizer`. Log-probabilities are
    those of the temperature-scaled distribution (top-k/top-p not applied), the ones a trainer recomputes.
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = DEFAULT_STOP_STRINGS
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        self.stop = tuple(self.stop)


class Generation(NamedTuple):
    """One sampled turn: the exact ids, their log-probabilities and why sampling stopped."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


@runtime_checkable
class TokenBackend(Protocol):
    """Generates from token ids (transformers, vLLM). ``budgets[i]`` caps the new tokens of context ``i``."""

    def generate(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], params: SamplingParams
    ) -> list[Generation]: ...


@runtime_checkable
class ChatBackend(Protocol):
    """Generates from chat messages (an OpenAI-compatible endpoint). Returns the reply text per conversation."""

    def chat(self, conversations: Sequence[Sequence[dict[str, Any]]], params: SamplingParams) -> list[ChatReply]: ...


class ChatReply(NamedTuple):
    text: str
    finish_reason: FinishReason
    logprobs: list[float] | None = None


class StopScanner:
    """Finds where a turn ends in a growing list of sampled ids: an end-of-turn id, or the token that completes a
    stop string. Only a short window of trailing ids is decoded, to look for stop strings; nothing is re-encoded."""

    def __init__(self, decode: Callable[[list[int]], str], stop_ids: frozenset[int], stop: Sequence[str]) -> None:
        self.decode = decode
        self.stop_ids = stop_ids
        self.stop = tuple(s for s in stop if s)
        # A token is at least one byte; a stop string of n characters spans at most 4n bytes.
        self.window = 4 * max((len(s) for s in self.stop), default=0) + 1
        self._last_chars = {s[-1] for s in self.stop}
        self._may_end: dict[int, bool] = {}

    def _could_end(self, token: int) -> bool:
        """Whether ``token`` can complete a stop string: its text holds a stop string's last character (or is a
        partial UTF-8 sequence). Memoised per id, so most steps decode nothing."""
        known = self._may_end.get(token)
        if known is None:
            text = self.decode([token])
            known = self._may_end[token] = "\ufffd" in text or any(c in text for c in self._last_chars)
        return known

    def check(self, ids: Sequence[int]) -> FinishReason | None:
        """``"eos"`` or ``"stop"`` when the last id ends the turn, else ``None``."""
        if not ids:
            return None
        if ids[-1] in self.stop_ids:
            return "eos"
        if not self.stop or not self._could_end(ids[-1]):
            return None
        tail = list(ids[-self.window :])
        text = self.decode(tail)
        if not any(s in text for s in self.stop):
            return None
        before = self.decode(tail[:-1])
        return "stop" if not any(s in before for s in self.stop) else None

    def cut(self, ids: Sequence[int]) -> tuple[int, FinishReason | None]:
        """Length of the turn in ``ids`` and its finish reason (``None`` when no stop was found)."""
        for n in range(1, len(ids) + 1):
            reason = self.check(ids[:n])
            if reason is not None:
                return n, reason
        return len(ids), None
