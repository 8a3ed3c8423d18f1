"""What a chat template accepts, found by rendering probe conversations, and the env messages rewritten to fit it.

An env speaks in ``system``, ``user``, ``assistant`` and ``tool`` messages, with several env messages in a row after a
turn (two tool results and a note, say). Templates differ in what they take:

* no system role (Gemma 1/2 raise ``System role not supported``): the system text is folded into the first user
  message followed by a blank line, as Gemma 3's own template folds it (``first_user_prefix`` in TRL's
  ``gemma3.jinja``);
* no tool role (Cohere, Gemma, Phi-3: Phi-3 drops tool messages silently, Cohere and Gemma raise): tool results are
  user messages;
* roles that must alternate (Cohere, Gemma: ``Conversation roles must alternate``): the env messages after a turn are
  merged into one user message, separated by blank lines;
* a tool role that needs a structured call on the assistant message (gpt-oss: ``Message has tool role, but there was
  no previous assistant message with a tool call!``): each assistant message is rebuilt from its text with the
  family's response parser (content, reasoning, ``tool_calls``), as TRL's GRPO tool loop builds them
  (``trl.chat_template_utils.parse_response``); tool results after a turn without a parsed call are user messages.

Probing needs no table of templates, so a template TRL does not ship is handled the same way; one that cannot render
an episode at all raises :class:`~agentgym_r1.error.TemplateUnsupportedError` naming the family and what is missing,
before any rollout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentgym_r1.error import TemplateUnsupportedError

Message = dict[str, Any]
Render = Callable[[list[Message], bool], str]
Structure = Callable[[str], Message]
ToolRole = Literal["tool", "call", "user"]

_S, _U, _A, _T, _T2, _U2 = (f"agentgymprobe{w}" for w in ("system", "user", "assistant", "toolone", "tooltwo", "note"))
_PROBE_CALL = [{"type": "function", "function": {"name": "probe", "arguments": {}}}]


@dataclass(frozen=True, slots=True)
class TemplateShape:
    """What a template accepts. ``generation_prompt`` is the text ``add_generation_prompt`` adds after a user turn."""

    family: str
    generation_prompt: str
    fold_system: bool = False
    tool_role: ToolRole = "tool"
    merge_env: bool = False

    def prepare(self, messages: Sequence[Message], structure: Structure | None = None) -> list[Message]:
        """``messages`` (an env's chat form) rewritten so the template renders them; the input is not modified."""
        out = [dict(m) for m in messages]
        if self.fold_system and out and out[0].get("role") == "system":
            system = out.pop(0)
            if out and out[0].get("role") == "user":
                out[0]["content"] = f"{system['content']}\n\n{out[0]['content']}"
            else:
                out.insert(0, {"role": "user", "content": system["content"]})
        if self.tool_role != "tool":
            out = self._tools_as(out, structure)
        return _merge_env(out) if self.merge_env else out

    def _tools_as(self, messages: list[Message], structure: Structure | None) -> list[Message]:
        """Tool results as user messages, or (``tool_role="call"``) after assistant messages carrying their calls."""
        called = False
        for i, m in enumerate(messages):
            if m.get("role") == "assistant":
                if self.tool_role == "call" and structure is not None:
                    messages[i] = m = structure(str(m.get("content") or ""))
                called = bool(m.get("tool_calls"))
            elif m.get("role") == "tool" and not called:
                messages[i] = {"role": "user", "content": m["content"]}
        return messages


def _merge_env(messages: list[Message]) -> list[Message]:
    """Each run of env messages after an assistant turn merged into one user message, separated by blank lines."""
    out: list[Message] = []
    after_turn = False
    for m in messages:
        if m.get("role") == "assistant":
            after_turn = True
            out.append(m)
        elif after_turn and out[-1].get("role") != "assistant":
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{m['content']}"}
        else:
            out.append({"role": "user", "content": m["content"]} if after_turn else m)
    return out


def _try(render: Render, messages: list[Message], generation: bool, *needles: str) -> tuple[str | None, str]:
    """The rendering when it succeeds and holds every needle; else ``None`` and why."""
    try:
        text = render(messages, generation)
    except Exception as e:  # a template raises whatever its author chose (TemplateError, TypeError, KeyError)
        return None, f"{type(e).__name__}: {e}"
    missing = [n for n in needles if n not in text]
    return (None, f"drops {missing}") if missing else (text, "")


def probe(render: Render, family: str) -> TemplateShape:
    """Render probe conversations through ``render(messages, add_generation_prompt)`` and say what fits."""

    def unsupported(what: str, why: str) -> TemplateUnsupportedError:
        return TemplateUnsupportedError(
            f"the chat template of family {family} cannot serve the rollout engine: {what} "
            f"({why}). Pass chat_template= with a template that can."
        )

    user = [{"role": "user", "content": _U}]
    plain, why = _try(render, user, False, _U)
    with_prompt, why2 = _try(render, user, True, _U)
    if plain is None or with_prompt is None:
        raise unsupported(
            "it cannot render one user message with text content (a multimodal-only template reads "
            "content as a list of image/text blocks)",
            why or why2,
        )
    common = next(
        (i for i, (a, b) in enumerate(zip(plain, with_prompt, strict=False)) if a != b),
        min(len(plain), len(with_prompt)),
    )
    if with_prompt.rfind("<", 0, common) > with_prompt.rfind(">", 0, common):  # not inside a special token
        common = with_prompt.rfind("<", 0, common)
    answered = _try(render, [*user, {"role": "assistant", "content": _A}], False, _A)[0] or ""
    headless = with_prompt == plain and answered.startswith(plain + _A)  # Mistral: the reply follows [/INST]
    if not headless and (with_prompt == plain or _U not in with_prompt[:common]):
        raise unsupported(
            "add_generation_prompt=True adds no assistant header after the user message",
            f"rendered {with_prompt[-40:]!r}",
        )
    fold = _try(render, [{"role": "system", "content": _S}, *user], True, _S, _U)[0] is None
    if fold and _try(render, [{"role": "user", "content": f"{_S}\n\n{_U}"}], True, _S)[0] is None:
        raise unsupported("it renders neither a system message nor a long first user message", why)
    turn = [*user, {"role": "assistant", "content": _A}]
    if why := _try(render, turn, False, _A)[1]:
        raise unsupported("it does not render an assistant message's content as given", why)
    tool_role = _tool_role(render, turn)
    if tool_role is None:
        raise unsupported(
            "it renders the env's reply after an assistant turn neither as a tool nor as a user message",
            _try(render, [*turn, {"role": "user", "content": _T}], True, _T)[1],
        )
    shape = TemplateShape(family, with_prompt[common:], fold, tool_role)
    reply = [*turn, {"role": "tool", "content": _T}, {"role": "tool", "content": _T2}, {"role": "user", "content": _U2}]
    if _try(render, shape.prepare(reply, _probe_structure), True, _T, _T2, _U2)[0] is not None:
        return shape
    merged = TemplateShape(family, shape.generation_prompt, fold, tool_role, merge_env=True)
    text, why = _try(render, merged.prepare(reply, _probe_structure), True, _T, _T2, _U2)
    if text is None:
        raise unsupported("it cannot render several env messages after a turn, apart or merged", why)
    return merged


def _probe_structure(content: str) -> Message:
    """The probe's stand-in for a response parser: the probe's assistant turn carries one call."""
    return {"role": "assistant", "content": "", "tool_calls": _PROBE_CALL}


def _tool_role(render: Render, turn: list[Message]) -> ToolRole | None:
    if _try(render, [*turn, {"role": "tool", "content": _T}], True, _T, _A)[0] is not None:
        return "tool"
    called = [
        turn[0],
        {"role": "assistant", "content": "", "tool_calls": _PROBE_CALL},
        {"role": "tool", "name": "probe", "content": _T},
    ]
    if _try(render, called, True, _T)[0] is not None:
        return "call"
    if _try(render, [*turn, {"role": "user", "content": _T}], True, _T)[0] is not None:
        return "user"
    return None
