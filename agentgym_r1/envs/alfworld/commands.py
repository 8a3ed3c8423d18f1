"""Reading an ALFWorld action: plain text or an ``act`` tool call (Hermes, or the env's tool parser), down to one
engine command.

Pure functions, no engine: :func:`read_action` turns the model's text into one normalised command (lower case,
single spaces) or says what is wrong with it; :func:`explain` says why a well-formed command is not admissible
(unknown verb, unknown object, or ALFWorld's own "Nothing happens.").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from agentgym_r1.core.parsers import ActionParser, HermesParser, ParsedAction, strip_think

NOTHING_HAPPENS = "Nothing happens."
ACT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "act",
        "description": "Do one ALFWorld command in the household, e.g. 'go to desk 1', 'take mug 1 from desk 1', "
        "'open fridge 1', 'heat mug 1 with microwave 1', 'look', 'inventory'.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "one command"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}
EXAMPLE = "Write one command such as 'go to desk 1' or 'take mug 1 from desk 1'"

_PREFIX = re.compile(r"^\s*(?:>\s*|action\s*:\s*)", re.I)
_SEPARATORS = re.compile(r";| and then |, ?then |\. (?=[a-z])", re.I)  # on text whose whitespace runs are one space
_ALLOWED = re.compile(r"[a-z0-9 /\-']+")
_PLACEHOLDER = re.compile(r"\[[^\]]*\]|\{[^}]*\}")
_ROLE = {"r": "receptacle", "o": "object", "outerr": "receptacle", "outero": "object", "co": "object", "ko": "object"}


@dataclass(slots=True)
class ReadAction:
    """The reading of one action. ``kind``: ``command``, ``think`` or ``invalid`` (``error`` says why)."""

    kind: str
    command: str | None = None
    error: str | None = None
    via_tool: bool = False
    format_error: bool = False

    def to_info(self) -> dict[str, Any]:
        if self.kind == "command":
            info: dict[str, Any] = {
                "kind": "command",
                "verb": self.command.split(" ", 1)[0] if self.command else "",
                "arg": self.command,
            }
            if self.via_tool:
                info = {"kind": "tool_call", "calls": [{"name": "act", "arguments": {"command": self.command}}]}
            return info
        if self.kind == "think":
            return {"kind": "command", "verb": "think", "arg": self.command}
        return {"kind": "invalid", "error": self.error}


def _invalid(problem: str, via_tool: bool = False) -> ReadAction:
    return ReadAction("invalid", error=f"Invalid action: {problem}. {EXAMPLE}.", via_tool=via_tool, format_error=True)


HERMES = HermesParser(answer_formats=())


def read_action(text: str, parser: ActionParser = HERMES) -> ReadAction:
    """One command from plain text or from one call to ``act`` in ``parser``'s format (default Hermes
    ``<tool_call>``; any text the parser claims, :meth:`~agentgym_r1.core.parsers.ActionParser.parse_claimed`, is
    read as a call); never raises."""
    text = strip_think(text)
    parsed = parser.parse_claimed(text, {})  # one reading: a family's reader costs as much to claim as to parse
    return read_command(text) if parsed is None else _read_tool_call(parsed)


def _read_tool_call(parsed: ParsedAction) -> ReadAction:
    if parsed.kind == "invalid":
        return _invalid(parsed.problem or "the tool call cannot be read", True)
    if parsed.kind != "tool_call":
        return _invalid("no call to the tool 'act' found", True)
    if len(parsed.calls) != 1:
        return _invalid(f"{len(parsed.calls)} tool calls in one action; send one command per turn", True)
    call = parsed.calls[0]
    if call.name != "act":
        return _invalid(f"unknown tool {call.name!r}; the only tool is 'act' with a 'command' string", True)
    command = call.arguments.get("command")
    if not isinstance(command, str) or set(call.arguments) != {"command"}:
        return _invalid("'act' takes exactly one argument, 'command', a string", True)
    read = read_command(command)
    read.via_tool = True
    return read


def read_command(text: str) -> ReadAction:
    """A plain-text command, normalised; empty text, several commands and other languages are invalid."""
    text = _PREFIX.sub("", text.strip(), count=1).strip()
    if text.lower().startswith("think:"):
        return ReadAction("think", command=text[6:].strip())
    lines = (" ".join(line.split()) for line in text.split("\n"))  # linear; the separators then match fixed text
    parts = [p.strip() for line in lines for p in _SEPARATORS.split(line) if p and p.strip(" .")]
    if not parts:
        return _invalid("the command is empty")
    if len(parts) > 1:
        shown = ", ".join(repr(p[:40]) for p in parts[:3])
        return _invalid(f"{len(parts)} commands in one action ({shown}); send one command per turn")
    command = " ".join(parts[0].lower().split()).rstrip(".!")
    if not command.isascii():
        return _invalid(f"{command[:40]!r} is not an English command; commands use English words and ASCII letters")
    if not _ALLOWED.fullmatch(command):
        bad = sorted(ch for ch in set(command) if not _ALLOWED.fullmatch(ch))
        return _invalid(f"{command[:40]!r} has characters no command uses ({''.join(bad)[:10]!r})")
    return ReadAction("command", command=command)


def _pattern(template: str) -> tuple[re.Pattern[str], list[str]]:
    roles = []
    for m in _PLACEHOLDER.finditer(template):
        key = m.group(0).strip("[]{}").split(".")[0].split("|")[0].strip()
        roles.append(_ROLE.get(key, "receptacle" if m.group(0).startswith("[") else "object"))
    pieces = [re.escape(p) for p in _PLACEHOLDER.split(template)]
    return re.compile("(.+?)".join(pieces)), roles


def command_forms(templates: Iterable[str]) -> list[str]:
    """Templates as the agent reads them: ``take (object) from (receptacle)``."""
    forms = []
    for template in templates:
        _, roles = _pattern(template)
        pieces = _PLACEHOLDER.split(template)
        form = pieces[0] + "".join(f"({r}){p}" for r, p in zip(roles, pieces[1:], strict=True))
        if form not in forms:
            forms.append(form)
    return forms


def explain(command: str, templates: Iterable[str], names: Collection[str]) -> tuple[str, str]:
    """``(observation, error)`` for a command that is not admissible now; the error is part of the observation."""
    templates = list(templates)
    for template in templates:
        pattern, _ = _pattern(template)
        m = pattern.fullmatch(command)
        if m is None:
            continue
        unknown = [arg for arg in m.groups() if arg not in names]
        if unknown:
            error = f'There is no "{unknown[0][:60]}" in this room.'
            return f"{NOTHING_HAPPENS} {error}", error
        return NOTHING_HAPPENS, NOTHING_HAPPENS
    error = f'"{command[:60]}" is not a command.'
    return f"{NOTHING_HAPPENS} {error} The commands are: {'; '.join(command_forms(templates))}.", error
