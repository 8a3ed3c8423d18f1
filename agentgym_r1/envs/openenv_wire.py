"""The wire format of a served env (``agentgym-r1 serve env``): OpenEnv ``Action``/``Observation``/``State`` models.

Both ends import this module: the server (:mod:`agentgym_r1.serve.openenv_server`) adapts a Gymnasium env to them
and the client (:mod:`agentgym_r1.envs.remote`, ``AgentR1/Remote-v0``) reads them back into Gymnasium's five values.

- :class:`AgentAction`: ``{"text": <the action string>}``.
- :class:`AgentObservation`: ``text`` (the observation string), ``terminated``, ``truncated``, ``info`` (the step's
  ``info`` made JSON-safe: spans as ``[start, end, source]``, reward parts, metrics, ...) and ``transcript`` (the
  pieces the step appended to the env's transcript, so a client can rebuild ``env.unwrapped.transcript`` exactly).
  ``metadata`` holds the same ``info`` in-process. openenv-core 0.3.0's ``serialize_observation``
  (``openenv/core/env_server/serialization.py``) leaves ``metadata`` out of what it sends (huggingface/OpenEnv#616,
  fix pending in #617), so the info also travels in the declared ``info`` field.
- :class:`AgentState`: the env id, the action/observation length bounds, the turn, the task (id, prompt, gold answer,
  meta) and the grade so far: what ``env.unwrapped.task`` and ``env.unwrapped.grade`` give in-process.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from agentgym_r1.core.spaces import utf8_safe
from agentgym_r1.core.tasks import Task
from agentgym_r1.core.transcript import Span, Transcript
from agentgym_r1.error import require

require("openenv.core", "serve", "Serving envs with OpenEnv (agentgym-r1 serve env, AgentR1/Remote-v0)")
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from pydantic import Field  # noqa: E402


class AgentAction(Action):
    """One action of a text env: the string a model wrote."""

    text: str = Field(description="The action text (a tool call, an answer or a command)")


class AgentObservation(Observation):
    """One observation of a text env, with the step's info and the transcript pieces the step added."""

    text: str = Field(default="", description="The observation text")
    terminated: bool = Field(default=False, description="The task ended (Gymnasium's terminated)")
    truncated: bool = Field(default=False, description="The turn limit ended the episode (Gymnasium's truncated)")
    info: dict[str, Any] = Field(default_factory=dict, description="The step's info, JSON-safe")
    transcript: list[dict[str, Any]] = Field(
        default_factory=list, description="Pieces appended to the transcript: {source, text, role, content}"
    )


class AgentState(State):
    """What a served env is and where its episode stands."""

    env_id: str = ""
    max_action_chars: int = 0
    max_observation_chars: int = 0
    turn: int = 0
    done: bool = True
    task: dict[str, Any] | None = None
    grade: dict[str, Any] | None = None


def jsonable(obj: Any) -> Any:
    """``obj`` with JSON types only: tuples become lists, paths and unknown objects their ``str``, NaN ``None``, and
    every string writable as UTF-8 (a lone surrogate, which a model's ``"\\ud800"`` JSON escape gives, becomes
    U+FFFD: :func:`~agentgym_r1.core.spaces.utf8_safe`)."""
    if obj is None or isinstance(obj, bool | int):
        return obj
    if isinstance(obj, str):
        return utf8_safe(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {utf8_safe(str(k)): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return jsonable(obj.item())
    return utf8_safe(str(obj))  # paths and anything else


def info_from_wire(info: Mapping[str, Any]) -> dict[str, Any]:
    """The step's info as the client's Gymnasium API gives it: spans back to :class:`Span` tuples."""
    out = dict(info)
    if "spans" in out:
        out["spans"] = [Span(int(s[0]), int(s[1]), s[2]) for s in out["spans"]]
    return out


def transcript_pieces(transcript: Transcript, first_span: int, first_message: int) -> list[dict[str, Any]]:
    """The spans from ``first_span`` on (the messages from ``first_message`` on), each span with its text and,
    where it renders a chat message, that message's role and content."""
    spans = transcript.spans[first_span:]
    if not spans:
        return []
    text = transcript.text
    # Every message was recorded with the span that renders it, in the same order: walk both together.
    messages = transcript.message_spans()[first_message:]
    pieces, k = [], 0
    for s in spans:
        m = None
        if k < len(messages) and (messages[k].start, messages[k].end) == (s.start, s.end):
            m, k = messages[k], k + 1
        piece_text = text[s.start : s.end]
        content = None if m is None or m.content == piece_text else m.content
        pieces.append(
            {"source": s.source, "text": piece_text, "role": None if m is None else m.role, "content": content}
        )
    return pieces


def task_to_wire(task: Task | None) -> dict[str, Any] | None:
    return (
        None
        if task is None
        else jsonable({"id": task.id, "prompt": task.prompt, "answer": task.answer, "meta": dict(task.meta)})
    )


def task_from_wire(data: Mapping[str, Any] | None) -> Task | None:
    if data is None:
        return None
    return Task(str(data["id"]), str(data["prompt"]), data.get("answer"), dict(data.get("meta") or {}))
