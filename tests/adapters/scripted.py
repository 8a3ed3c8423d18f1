"""A token backend with known outputs, for tests that check the exact ids that come back."""

from __future__ import annotations

from agentgym_r1.adapters.backends.base import Generation, SamplingParams


class ScriptedBackend:
    """A token backend whose ids are known in advance, so tests can check that exactly these ids come back.

    ``act(context_ids, turn) -> (text, ends_with_eos)`` gives each turn's action; the backend encodes the text and
    appends the end-of-turn id ``end_id`` (default: eos) when asked (the turn then ends with the model's own
    end-of-turn token; without it, it ends as
    on a stop string). ``turn`` is the round number (the turn index when every episode starts together).
    """

    def __init__(self, chat, act, end_id: int | None = None) -> None:
        self.chat = chat
        self.end_id = end_id
        self.act = act
        self.turn = 0
        self.sent: list[list[int]] = []

    def generate(self, contexts, budgets, params: SamplingParams) -> list[Generation]:
        out = []
        eos = self.chat.tokenizer.eos_token_id if self.end_id is None else self.end_id
        for context, budget in zip(contexts, budgets, strict=True):
            text, with_eos = self.act(list(context), self.turn)
            ids = self.chat.encode(text) + ([eos] if with_eos else [])
            reason = "eos" if with_eos else "stop"
            if len(ids) > budget:
                ids, reason = ids[:budget], "length"
            self.sent.append(list(ids))
            out.append(Generation(ids, [-0.5] * len(ids), reason))
        self.turn += 1
        return out
