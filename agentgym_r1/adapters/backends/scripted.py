"""A token backend that replays scripted turns instead of sampling: an expert's actions, played through the rollout
engine so that supervised rows are made exactly as sampled ones are (:func:`agentgym_r1.trainers.sft.expert_rows`).

Each script belongs to one first prompt (its token ids) and holds the ids of every agent turn, end-of-turn token
included. The backend learns which script and turn a context continues from the contexts it answered before: a
first turn's context is the script's prompt; a later turn's context starts with the previous context and the ids the
backend returned for it (the env's reply follows). Episodes that share a prompt play the same script.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from agentgym_r1.adapters.backends.base import Generation, SamplingParams
from agentgym_r1.error import ConfigError


class ScriptedBackend:
    """Answers each context with the next turn of its script (log-probability 0 for every id).

    ``scripts`` maps a first prompt's ids to its turns' ids. A context that continues no script, or a script played
    past its last turn, raises :class:`~agentgym_r1.error.ConfigError` (the engine ends those episodes with
    ``"generation_error"`` and the message). A turn longer than its budget is cut there (``finish_reason="length"``),
    as a sampling backend would cut it.
    """

    def __init__(self, scripts: Mapping[Sequence[int], Sequence[Sequence[int]]]) -> None:
        self.scripts = {tuple(k): [list(t) for t in v] for k, v in scripts.items()}
        if any(not turn for turns in self.scripts.values() for turn in turns):
            raise ConfigError("a scripted turn is empty: every turn needs at least one token id")
        self._prompt_lengths = sorted({len(k) for k in self.scripts}, reverse=True)
        # per prompt: (context + returned ids, the next turn's index) of every turn played; reset by each session
        self._played: dict[tuple[int, ...], list[tuple[tuple[int, ...], int]]] = {}

    @contextmanager
    def rollout_session(self) -> Iterator[None]:
        """One rollout: what was played is forgotten when it ends (the engine opens one per rollout)."""
        try:
            yield
        finally:
            self._played.clear()

    def generate(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        del params  # nothing is sampled
        out: list[Generation] = []
        played: list[tuple[tuple[int, ...], tuple[int, ...], int]] = []
        for context, budget in zip(contexts, budgets, strict=True):
            prompt, turn = self._locate(tuple(context))
            turns = self.scripts[prompt]
            if turn >= len(turns):
                raise ConfigError(
                    f"the script of a {len(prompt)}-token prompt has {len(turns)} turns; turn {turn + 1} asked"
                )
            ids = turns[turn][:budget]
            played.append((prompt, (*context, *ids), turn + 1))
            reason = "length" if len(ids) < len(turns[turn]) else "stop"
            out.append(Generation(ids, [0.0] * len(ids), reason))
        for prompt, key, turn in played:
            self._played.setdefault(prompt, []).append((key, turn))
        return out

    def _locate(self, context: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        if context in self.scripts:
            return context, 0
        for n in self._prompt_lengths:  # the longest prompt this context starts with that was played
            if n >= len(context) or context[:n] not in self.scripts:
                continue
            prompt = context[:n]
            for key, turn in sorted(self._played.get(prompt, ()), key=lambda p: -len(p[0])):
                if len(key) <= len(context) and context[: len(key)] == key:
                    return prompt, turn
        raise ConfigError(f"a context of {len(context)} tokens continues no script (no turn played for its prompt)")
