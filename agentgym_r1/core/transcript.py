"""The episode transcript: one text, cut into spans written by the agent or by the environment.

The transcript's text is every observation and action of the episode concatenated, with nothing added between them:
``obs0 + a1 + obs1 + a2 + ...``. Each piece is a :class:`Span` whose ``source`` is ``"agent"`` or ``"env"``, so the
spans tile the text and the agent spans concatenate to exactly the actions the agent gave (an action over the env's
length limit is kept cut to the limit). A trainer that masks the loss from these spans masks exactly what the agent
wrote.

Beside the spans the transcript keeps the chat form (:meth:`Transcript.messages`): system, user, assistant and tool
messages, for adapters that render the episode through a chat template.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Source = Literal["agent", "env"]
Role = Literal["system", "user", "assistant", "tool"]


class Span(NamedTuple):
    """Characters ``[start, end)`` of the transcript text, written by ``source``."""

    start: int
    end: int
    source: Source


class Message(NamedTuple):
    """One chat message and the span of the transcript text that renders it."""

    role: Role
    content: str
    start: int
    end: int


class Transcript:
    """The text of one episode with its spans and messages. Appending is O(length of the piece)."""

    __slots__ = ("_chunks", "_length", "_messages", "_spans")

    def __init__(self) -> None:
        self._chunks: list[str] = []
        self._spans: list[Span] = []
        self._messages: list[Message] = []
        self._length = 0

    def append(self, source: Source, text: str, role: Role | None = None, content: str | None = None) -> Span:
        """Append ``text`` written by ``source``; with ``role``, also record a chat message.

        ``content`` is the message's content when it differs from the rendered ``text`` (a tool result wrapped in
        ``<tool_response>`` tags, say); it defaults to ``text``.
        """
        start = self._length
        self._length += len(text)
        span = Span(start, self._length, source)
        self._chunks.append(text)
        self._spans.append(span)
        if role is not None:
            self._messages.append(Message(role, text if content is None else content, start, self._length))
        return span

    @property
    def text(self) -> str:
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def spans(self) -> list[Span]:
        return list(self._spans)

    def __len__(self) -> int:
        return self._length

    def agent_text(self) -> str:
        """The agent spans concatenated: exactly the actions of the episode."""
        text = self.text
        return "".join(text[s.start : s.end] for s in self._spans if s.source == "agent")

    def messages(self) -> list[dict[str, str]]:
        """The episode in chat form: ``[{"role": ..., "content": ...}, ...]``."""
        return [{"role": m.role, "content": m.content} for m in self._messages]

    def message_spans(self) -> list[Message]:
        return list(self._messages)

    def agent_mask(self) -> list[int]:
        """Per character of :attr:`text`: 1 where the agent wrote it, 0 where the environment did."""
        mask = [0] * self._length
        for s in self._spans:
            if s.source == "agent":
                mask[s.start : s.end] = [1] * (s.end - s.start)
        return mask
