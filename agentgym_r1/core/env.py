"""The text environment base class and the ``info`` schema shared by every env.

Subclasses implement :meth:`Env._begin` (choose the task, return the first messages) and :meth:`Env._act` (apply
one action, return a :class:`Turn`). The base class keeps the :class:`~agentgym_r1.core.transcript.Transcript`,
builds the observation from the env's messages and fills ``info`` the same way for every env:

``turn``, ``action``, ``valid``, ``error``, ``reward_parts`` (``outcome``, ``process``, ``format``), ``reward``,
``spans``, ``success``, ``metrics`` and ``env`` (env-specific extras).
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym_r1.core.spaces import DEFAULT_MAX_ACTION, DEFAULT_MAX_OBSERVATION, UnicodeText
from agentgym_r1.core.tasks import Task, TaskSource
from agentgym_r1.core.transcript import Role, Span, Transcript
from agentgym_r1.error import ConfigError, ResetNeeded, UnknownOptionError

INFO_KEYS = ("turn", "action", "valid", "error", "reward_parts", "reward", "spans", "success", "metrics", "env")


@dataclass(slots=True)
class Grade:
    """How an answer scored: the outcome reward, whether it counts as solved, and the env's metrics."""

    score: float
    success: bool
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class EnvMessage:
    """A message from the env: ``text`` goes into the observation; ``content`` (default ``text``) into the chat form.

    ``role=None`` marks text that belongs to no chat message (a separator).
    """

    role: Role | None
    text: str
    content: str | None = None


@dataclass(slots=True)
class Turn:
    """What one action did. ``_act`` returns it; the base class turns it into the step's five values."""

    action: dict[str, Any]
    messages: list[EnvMessage] = field(default_factory=list)
    outcome: float = 0.0
    process: float = 0.0
    format: float = 0.0
    valid: bool = True
    error: str | None = None
    terminated: bool = False
    extra: dict[str, Any] | None = None


def reject_unknown(owner: str, unknown: Mapping[str, Any], known: Iterable[str]) -> None:
    """Raise :class:`UnknownOptionError` for options a constructor or ``reset`` does not take."""
    if unknown:
        raise UnknownOptionError(
            f"{owner} got unknown option(s) {sorted(unknown)}; the options it takes are {sorted(known)}"
        )


def finite_option(name: str, value: Any) -> float:
    """``value`` as a float, or :class:`ConfigError` when it is not a finite number (a NaN penalty poisons every
    return it enters)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return number


def _finite_parts(turn: Turn) -> None:
    """Non-finite reward parts (a reward function or tool that returned NaN or inf) count as 0, with a warning."""
    for part in ("outcome", "process", "format"):
        value = getattr(turn, part)
        if not math.isfinite(value):
            warnings.warn(
                f"the {part} reward of a step was {value}; it counts as 0. Check the env's reward function and tools.",
                RuntimeWarning,
                stacklevel=3,
            )
            setattr(turn, part, 0.0)


def init_options(cls: type) -> list[str]:
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "kwargs")]


class Env(gym.Env[str, str]):
    """A text environment: observations and actions are strings; see the module docstring for ``info``."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012  (Gymnasium's API)
    reset_options: frozenset[str] = frozenset({"task_id", "index"})

    def __init__(
        self,
        *,
        render_mode: str | None = None,
        max_action_chars: int = DEFAULT_MAX_ACTION,
        max_observation_chars: int = DEFAULT_MAX_OBSERVATION,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode {render_mode!r} is not supported; use one of {self.metadata['render_modes']}"
            )
        self.render_mode = render_mode
        self.action_space = UnicodeText(max_action_chars)
        self.observation_space = UnicodeText(max_observation_chars)
        self.max_observation_chars = max_observation_chars
        self.transcript = Transcript()
        self.turn = 0
        self.grade = self.no_grade()
        self._needs_reset = True

    # -- for subclasses ---------------------------------------------------------------------------------------------
    def _begin(self, options: dict[str, Any]) -> list[EnvMessage]:
        """Pick the task (``self.np_random`` or ``options``) and return the first messages."""
        raise NotImplementedError

    def _act(self, action: str) -> Turn:
        """Apply one action. Never raises for anything in ``action``."""
        raise NotImplementedError

    def no_grade(self) -> Grade:
        """The grade before any answer: zero score, not solved, the env's metrics at their zero values."""
        return Grade(0.0, False, {})

    def env_info(self) -> dict[str, Any]:
        """Env-specific extras for ``info["env"]`` (admissible commands, page, ...)."""
        return {}

    # -- Gymnasium API ----------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        reject_unknown(
            f"{type(self).__name__}.reset",
            {k: v for k, v in options.items() if k not in self.reset_options},
            self.reset_options,
        )
        self.transcript = Transcript()
        self.turn = 0
        self.grade = self.no_grade()
        messages = self._begin(options)
        self._needs_reset = False
        obs, spans = self._emit(messages)
        return obs, {"turn": 0, "spans": spans, "env": self.env_info()}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise ResetNeeded("call reset() before step(), and again after the episode terminated")
        if not isinstance(action, str):
            raise TypeError(f"actions are strings; got {type(action).__name__}. Decode the model output first.")
        limit = self.action_space.max_length
        # an over-long action is kept cut to the limit: the transcript (and what a server echoes of it) stays bounded
        # whatever the model wrote, and its span covers exactly the text kept
        spans = [self.transcript.append("agent", action[:limit], role="assistant")]
        if len(action) > limit:
            turn = Turn(
                {"kind": "invalid", "error": "too long"},
                valid=False,
                error=f"Invalid action: {len(action)} characters, more than the limit of {limit}; the "
                f"transcript keeps its first {limit}.",
            )
            turn.format = getattr(self, "format_penalty", 0.0)
            turn.messages = [EnvMessage("user", turn.error)]
        else:
            turn = self._act(action)
        _finite_parts(turn)
        obs, env_spans = self._emit(turn.messages)
        spans.extend(env_spans)
        reward = turn.outcome + turn.process + turn.format
        grade = self.grade
        info = {
            "turn": self.turn,
            "action": turn.action,
            "valid": turn.valid,
            "error": turn.error,
            "reward_parts": {"outcome": turn.outcome, "process": turn.process, "format": turn.format},
            "reward": reward,
            "spans": spans,
            "success": grade.success,
            "metrics": dict(grade.metrics),
            "env": self.env_info() if turn.extra is None else turn.extra,
        }
        self.turn += 1
        if turn.terminated:
            self._needs_reset = True
        return obs, reward, turn.terminated, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.transcript.text
        return None

    # -- helpers ----------------------------------------------------------------------------------------------------
    def _emit(self, messages: list[EnvMessage]) -> tuple[str, list[Span]]:
        spans, texts = [], []
        budget = self.max_observation_chars
        for m in messages:
            text = m.text if len(m.text) <= budget else m.text[:budget]
            budget -= len(text)
            spans.append(self.transcript.append("env", text, role=m.role, content=m.content))
            texts.append(text)
        return "".join(texts), spans

    def pick(self, source: TaskSource, options: Mapping[str, Any]) -> Task:
        """The task named by ``options`` (``task_id`` or ``index``), else one drawn with ``self.np_random``."""
        if "task_id" in options:
            return source.by_id(str(options["task_id"]))
        if "index" in options:
            index = options["index"]
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(source):
                raise ConfigError(f"options['index'] must be an int in [0, {len(source)}), got {index!r}")
            return source[index]
        return source[int(self.np_random.integers(len(source)))]
