"""The proxy's record: an agent's chat-completions calls, per session, as the rollout engine's rows.

An agent written with any SDK talks to :mod:`agentgym_r1.adapters.proxy_server` as to OpenAI. Every call names its
session (the ``X-Session-Id`` header, else the API key) and is recorded here as the model saw and wrote it: the prompt
ids, each choice's sampled ids, log-probabilities and finish reason, and the reply the agent was given.

How a call's prompt is made decides the session's rows. When the call's messages are the previous call's messages,
then the reply the proxy returned (one of its choices), then new messages that are not the model's (tool results, a
user turn), the prompt is the previous prompt, the sampled ids and the new messages rendered as a suffix
(:meth:`ChatTokenizer.suffix_ids`): the rollout engine's own rule, nothing decoded and re-encoded, and the session
stays one **concatenated** row (:meth:`Episode.concatenated`). Otherwise (the agent rewrote, dropped or summarised
history, changed the tools, wrote an assistant message itself, or two calls were in flight at once) the messages are
rendered afresh; if that prompt still starts with the previous prompt and completion token for token, the row goes on,
else the session becomes **step** rows (:meth:`Episode.steps`: each call's own prompt and completion) and
:attr:`Session.why` says which call broke the chain and how. Nothing is re-tokenized to force a chain.

In the history an agent sends, an assistant message that is a reply this session returned is rendered as the text the
model sampled (tool calls as the model wrote them, a stop string it wrote included), as the engine renders its turns;
other assistant messages are rendered from their content and ``tool_calls`` through the template.

A session is closed by a reward: posted to the proxy, or given by a reward function of the session's messages (the
last call's messages and the reply). Sessions idle past ``timeout_s`` are evicted and counted, closed or not.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_r1.adapters.records import Episode, FinishReason, Layout, RolloutBatch, TurnRecord
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.error import AgentGymError, ConfigError

__all__ = ["Call", "Choice", "ProxyRefused", "Session", "SessionStore", "reply_message"]

Message = dict[str, Any]
Render = Callable[[list[Message], "list[dict[str, Any]] | None"], list[int]]
EXTENDS = "every call's prompt extends the previous call's prompt and completion token for token"
# Where a family's tool calls start in its text: what precedes is the reply's content.
CALL_MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<｜tool▁calls▁begin｜>", "<|channel|>commentary to=")


class ProxyRefused(AgentGymError):
    """A call the proxy refuses before any work (a closed or unknown session, too many sessions or calls);
    ``status`` is the HTTP code it answers with."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclass(slots=True)
class Choice:
    """One choice of a call: the sampled ids, their log-probabilities, why sampling stopped, the text the model wrote
    (without its end-of-turn token) and the OpenAI message the agent was given."""

    ids: list[int]
    logprobs: list[float]
    reason: FinishReason
    text: str
    message: Message


@dataclass(slots=True)
class Call:
    """One chat-completions call: its messages (normal form, :func:`normal`), tools and prompt ids, and, when it
    continues an earlier call, which (``parent``) and the ids of the messages between (``suffix``)."""

    messages: list[tuple[Any, ...]]
    tools: list[dict[str, Any]] | None
    prompt: list[int]
    choices: list[Choice]
    parent: int | None = None
    suffix: list[int] = field(default_factory=list)
    chosen: int = 0
    """The choice the next call continued (choice 0 until one does)."""


@dataclass
class Session:
    """One agent's episode through the proxy. ``layout`` is ``"concatenated"`` while every call extends the one
    before, else ``"step"``; ``why`` says so (or which call broke the chain, and how)."""

    id: str
    calls: list[Call] = field(default_factory=list)
    layout: Layout = "concatenated"
    why: str = EXTENDS
    seen: float = field(default_factory=time.monotonic)
    closed: bool = False
    reward: float | None = None
    end_reason: str = "terminated"
    error: str | None = None
    last_messages: list[Message] = field(default_factory=list)
    in_flight: int = 0

    @property
    def messages(self) -> list[Message]:
        """The conversation: the last call's messages and the reply it gave (its chosen choice)."""
        if not self.calls:
            return list(self.last_messages)
        last = self.calls[-1]
        return [*self.last_messages, last.choices[last.chosen].message]

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "calls": len(self.calls),
            "layout": self.layout,
            "why": self.why,
            "closed": self.closed,
            "reward": self.reward,
            "end_reason": self.end_reason,
        }

    def episode(self, group: int = 0, sample: int = 0, pad_token_id: int = 0) -> Episode:
        """The session as the engine's :class:`Episode` (its rows: :meth:`Episode.rows` with :attr:`layout`); a
        session without calls is a failed placeholder row."""
        reward = 0.0 if self.reward is None else self.reward
        failed = not self.calls or self.end_reason in ("env_error", "generation_error")
        ep = Episode(self.id, group, sample, "proxy", [], end_reason=self.end_reason, error=self.error)  # type: ignore[arg-type]
        ep.messages, ep.success = self.messages, reward > 0 and not failed
        if not self.calls:
            ep.placeholder, ep.end_reason = True, "env_error"
            ep.error = self.error or "the session made no call"
            ep.prompt_ids = [pad_token_id]
            ep.turns = [TurnRecord([pad_token_id], [0.0], "context", "", 1, trainable=False)]
            return ep
        step = self.layout == "step"
        ep.prompt_ids = list(self.calls[0].prompt)
        for i, call in enumerate(self.calls):
            choice = call.choices[call.chosen]
            turn = TurnRecord(
                list(choice.ids),
                list(choice.logprobs),
                choice.reason,
                choice.text,
                len(call.prompt),
                list(call.prompt) if step else None,
            )
            if not step and i + 1 < len(self.calls):
                turn.env_ids = list(self.calls[i + 1].suffix)
            ep.turns.append(turn)
        ep.turns[-1].reward, ep.turns[-1].reward_parts = reward, {"outcome": reward, "process": 0.0, "format": 0.0}
        return ep


@dataclass(slots=True)
class Plan:
    """What :meth:`SessionStore.plan` decided for a call, for :meth:`SessionStore.record` to keep."""

    session: Session
    messages: list[tuple[Any, ...]]
    raw: list[Message]
    tools: list[dict[str, Any]] | None
    prompt: list[int]
    parent: int | None = None
    chosen: int = 0
    suffix: list[int] = field(default_factory=list)
    broken: str | None = None
    first_prompt: int = 0


def canonical(arguments: Any) -> str:
    """A tool call's arguments in one form: JSON with sorted keys when they parse, else the text as given."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(arguments)


def normal(m: Message) -> tuple[Any, ...]:
    """What two messages must share to be the same turn: role, content (``None`` as ``""``) and each tool call's
    name and arguments. Ids are left out: an SDK may rewrite them, and they name nothing the model wrote."""
    calls = tuple(
        (str((c.get("function") or {}).get("name")), canonical((c.get("function") or {}).get("arguments", "{}")))
        for c in m.get("tool_calls") or ()
    )
    return (m.get("role"), m.get("content") or "", calls)


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def template_message(m: Message) -> Message:
    """An OpenAI message as chat templates take it: tool-call arguments as objects (Qwen's and Llama's templates
    write ``arguments | tojson``), ids and names kept."""
    out = {k: v for k, v in m.items() if v is not None}
    out["content"] = m.get("content") or ""
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {**c, "function": {"name": c["function"]["name"], "arguments": as_object(c["function"].get("arguments"))}}
            for c in m["tool_calls"]
        ]
    return out


def as_object(arguments: Any) -> Any:
    """Tool-call arguments as the JSON object they hold, else as given."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except (ValueError, RecursionError):
        return arguments
    return value if isinstance(value, dict) else arguments


def reply_message(chat: ChatTokenizer, reader: Any, text: str, tools: bool) -> Message:
    """The OpenAI message of the model's ``text``: with ``tools``, the family's tool calls parsed into ``tool_calls``
    (``reader`` is :func:`agentgym_r1.adapters.native.native_parser`'s) and the text before them as content; else the
    text. A call the reader cannot parse stays text: bad model output is the agent's to handle."""
    if not tools:
        return {"role": "assistant", "content": text}
    calls, problem = reader(text)
    if problem is not None or not calls:
        return {"role": "assistant", "content": text}
    cut = min((i for i in (text.find(m) for m in CALL_MARKERS) if i >= 0), default=0)
    content = text[:cut].strip() or None
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in calls
        ],
    }


class SessionStore:
    """The sessions of one proxy, thread-safe. ``timeout_s``: a session idle that long is evicted (counted in
    :attr:`evicted`, never-closed ones also in :attr:`evicted_open`); at most ``max_sessions`` live at once and
    ``max_calls`` calls per session (past either, a call is refused)."""

    def __init__(
        self, chat: ChatTokenizer, *, timeout_s: float = 600.0, max_sessions: int = 1024, max_calls: int = 256
    ) -> None:
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"session_timeout_s must be a finite number > 0, got {timeout_s!r}")
        for name, value in (("max_sessions", max_sessions), ("max_calls", max_calls)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        self.chat, self.timeout_s = chat, float(timeout_s)
        self.max_sessions, self.max_calls = max_sessions, max_calls
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.evicted = self.evicted_open = 0

    def evict(self) -> int:
        """Drop the sessions idle past the timeout (none with a call in flight); returns how many."""
        now = time.monotonic()
        with self.lock:
            old = [s for s in self.sessions.values() if not s.in_flight and now - s.seen > self.timeout_s]
            for s in old:
                del self.sessions[s.id]
            self.evicted += len(old)
            self.evicted_open += sum(not s.closed for s in old)
        return len(old)

    def stats(self) -> dict[str, int]:
        self.evict()
        with self.lock:
            live = list(self.sessions.values())
        return {
            "sessions": len(live),
            "open": sum(not s.closed for s in live),
            "closed": sum(s.closed for s in live),
            "evicted": self.evicted,
            "evicted_open": self.evicted_open,
        }

    def get(self, session_id: str) -> Session:
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise ProxyRefused(404, f"no session {session_id!r} (never opened, taken, or evicted)", "unknown_session")
        return session

    def open(self, session_id: str) -> Session:
        """The session ``session_id``, made on its first call."""
        self.evict()
        with self.lock:
            session = self.sessions.get(session_id)
            if session is None:
                if len(self.sessions) >= self.max_sessions:
                    raise ProxyRefused(
                        429,
                        f"the proxy already holds {self.max_sessions} sessions; close some (post their reward) "
                        f"or wait for idle ones to be evicted after {self.timeout_s:g} s",
                        "too_many_sessions",
                    )
                session = self.sessions[session_id] = Session(session_id)
            if session.closed:
                raise ProxyRefused(400, f"the session {session_id!r} is closed; start a new one", "session_closed")
            if len(session.calls) + session.in_flight >= self.max_calls:
                raise ProxyRefused(
                    400, f"the session {session_id!r} has made its {self.max_calls} calls", "too_many_calls"
                )
            session.in_flight += 1
            session.seen = time.monotonic()
            return session

    def plan(
        self, session: Session, messages: list[Message], tools: list[dict[str, Any]] | None, render: Render
    ) -> Plan:
        """The prompt of a call in ``session`` (see the module docstring); ``render(messages, tools)`` tokenizes a
        conversation afresh."""
        keys = [normal(m) for m in messages]
        with self.lock:
            calls = list(session.calls)
        replies = {normal(c.message): c.text for call in calls for c in call.choices}
        raw = [
            {"role": "assistant", "content": replies[normal(m)]}
            if m.get("role") == "assistant" and normal(m) in replies
            else template_message(m)
            for m in messages
        ]
        plan = Plan(session, keys, raw, tools, [], first_prompt=len(calls[0].prompt) if calls else 0)
        if not calls:
            plan.prompt = render(raw, tools)
            return plan
        last, index = calls[-1], len(calls) - 1
        plan.broken = self.chain(plan, last, index)
        if plan.broken is None:
            return plan
        plan.prompt = render(raw, tools)
        for k, choice in enumerate(last.choices):
            done = last.prompt + choice.ids
            if plan.prompt[: len(done)] == done:
                plan.parent, plan.chosen, plan.suffix, plan.broken = index, k, plan.prompt[len(done) :], None
                return plan
        done = last.prompt + last.choices[last.chosen].ids
        at = first_difference(plan.prompt, done)
        plan.broken += f"; rendered afresh, its prompt differs from call {index}'s prompt and completion at token {at}"
        return plan

    def chain(self, plan: Plan, last: Call, index: int) -> str | None:
        """Continue ``last`` (call ``index``) token for token when the messages allow; else why not."""
        n, keys = len(last.messages), plan.messages
        if plan.tools != last.tools:
            return f"the tools differ from call {index}'s"
        if keys[:n] != last.messages:
            return f"message {first_difference(keys, last.messages)} differs from call {index}'s messages"
        if len(keys) == n:
            return f"it repeats call {index}'s messages without its reply"
        k = next((k for k, c in enumerate(last.choices) if normal(c.message) == keys[n]), None)
        if k is None:
            return f"message {n} is not a reply call {index} returned"
        new = plan.raw[n + 1 :]
        if any(m.get("role") == "assistant" for m in new):
            return f"an assistant message the model did not write follows call {index}'s reply"
        choice = last.choices[k]
        try:
            suffix = self.chat.suffix_ids(plan.raw[: n + 1], new, choice.ids, plan.tools)
        except Exception as e:  # a template that cannot render this continuation: rendered afresh instead
            return f"the template cannot render the messages after call {index}'s reply ({type(e).__name__}: {e})"
        plan.parent, plan.chosen, plan.suffix = index, k, suffix
        plan.prompt = last.prompt + choice.ids + suffix
        return None

    def release(self, session: Session) -> None:
        """A call of ``session`` that failed (refused, timed out): nothing is kept."""
        with self.lock:
            session.in_flight -= 1
            session.seen = time.monotonic()

    def record(self, plan: Plan, choices: list[Choice], messages: list[Message]) -> int:
        """Keep the call ``plan`` made, answered with ``choices``; returns its index in the session."""
        session = plan.session
        with self.lock:
            session.in_flight -= 1
            session.seen = time.monotonic()
            index = len(session.calls)
            broken = plan.broken
            if broken is None and plan.parent is not None and plan.parent != index - 1:
                broken = f"it continues call {plan.parent}, but call {index - 1} was answered while it was in flight"
            if broken is None and plan.parent is None and index:
                broken = "it continues no earlier call"
            if broken is not None:
                plan.parent, plan.suffix = None, []
                if session.layout == "concatenated":
                    session.layout, session.why = "step", f"call {index}: {broken}"
            elif plan.parent is not None:
                session.calls[plan.parent].chosen = plan.chosen
            session.calls.append(Call(plan.messages, plan.tools, plan.prompt, choices, plan.parent, plan.suffix))
            session.last_messages = messages
            return index

    def close(
        self,
        session_id: str,
        reward: float | None = None,
        reward_fn: Callable[[list[Message]], float] | None = None,
        *,
        end_reason: str | None = None,
        error: str | None = None,
    ) -> Session:
        """Close the session with ``reward``, else ``reward_fn(session.messages)``; a second close changes nothing."""
        session = self.get(session_id)
        if session.closed:
            return session
        if reward is None and reward_fn is not None:
            reward = reward_fn(session.messages)
        if reward is not None and (
            isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward)
        ):
            raise ConfigError(f"the reward of session {session_id!r} must be a finite number, got {reward!r}")
        with self.lock:
            session.closed, session.reward = True, None if reward is None else float(reward)
            session.end_reason = end_reason or session.end_reason
            session.error = error or session.error
            session.seen = time.monotonic()
        return session

    def take(self, session_ids: Sequence[str]) -> list[Session]:
        """Remove and return these sessions (a missing one raises :class:`ProxyRefused`)."""
        with self.lock:
            missing = [s for s in session_ids if s not in self.sessions]
            if missing:
                raise ProxyRefused(404, f"no sessions {missing} (never opened, taken, or evicted)", "unknown_session")
            return [self.sessions.pop(s) for s in session_ids]


def batch_of(
    sessions: Sequence[Session], layout: Layout | None = None, groups: Sequence[int] | None = None, pad: int = 0
) -> RolloutBatch:
    """The sessions' rows as one :class:`RolloutBatch`. ``layout=None``: concatenated when every session's calls
    extend each other, else step rows for all. ``layout="concatenated"`` with a session that broke the chain: that
    session is a failed row (its reason in ``error``), never re-tokenized."""
    if layout is None:
        layout = "concatenated" if all(s.layout == "concatenated" for s in sessions) else "step"
    episodes = []
    for i, s in enumerate(sessions):
        group = groups[i] if groups is not None else 0
        ep = s.episode(group, i, pad)
        if layout == "concatenated" and s.layout == "step" and s.calls:
            ep = Session(s.id, [], end_reason="env_error", error=f"the session's calls do not chain: {s.why}").episode(
                group, i, pad
            )
        episodes.append(ep)
    return RolloutBatch(episodes, layout)
