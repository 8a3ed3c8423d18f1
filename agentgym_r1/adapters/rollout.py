"""The rollout engine: plays a batch of text envs turn by turn, batching generation across every live episode.

A batch is ``prompts x samples_per_prompt`` episodes. Each prompt is a reset (a seed and/or reset options such as
``{"task_id": ...}``); its samples reset the same way, so they play the same task (a GRPO group). At each round the
engine gathers the context of every live episode, asks the backend for one turn each, steps the envs with the
decoded actions, and appends the env's reply as chat-template suffix ids. See :mod:`agentgym_r1.adapters.records`
for what comes back and :mod:`agentgym_r1.adapters.tokenize` for how the ids are built.

Bad input never stops the batch: a model that never closes its tool call gets the env's error observation (and its
format penalty) and plays on; a turn or an env reply that would overflow ``max_context_tokens`` ends the episode with
``end_reason="context_limit"``; an env that raises ends its episode with ``"env_error"`` and the message.

Envs live where ``env_backend`` says (:mod:`agentgym_r1.adapters.env_backends`): in this process, stepped by
``env_workers`` threads (``"thread"``, default), in ``env_workers`` worker processes (``"process"``) or Ray actors
(``"ray"``, on ``ray_address``). The episodes are the same on each (seeds, transcripts, rewards); a worker that dies
ends the episodes it held with ``"env_error"`` and is replaced, and so does an env call past ``env_timeout``.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym_r1.adapters.backends.base import ChatBackend, SamplingParams, TokenBackend
from agentgym_r1.adapters.context import ContextPolicy, Summariser, make_context
from agentgym_r1.adapters.env_backends import (
    DEFAULT_ENV_TIMEOUT,
    EnvBackendName,
    EnvCall,
    EnvReply,
    check_env_backend,
    make_env_backend,
)
from agentgym_r1.adapters.native import resolve_env_kwargs
from agentgym_r1.adapters.records import EndReason, Episode, Layout, RolloutBatch, TurnRecord
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.error import ConfigError

EnvFactory = Callable[[], gym.Env]


@dataclass(slots=True)
class RolloutConfig:
    """How to play a batch. ``max_turns`` caps turns on top of the env's own turn limit (``None``: the env's).

    ``max_context_tokens`` bounds the whole sequence (prompt and completion); ``max_completion_tokens`` (full-history
    context only) bounds what follows the first prompt, agent and env tokens together, as TRL's
    ``max_completion_length`` does. An episode that reaches either ends with ``end_reason="context_limit"``.

    ``env_backend`` (``"thread"``, ``"process"`` or ``"ray"``) says where the envs run, ``env_workers`` with how many
    threads, processes or actors, ``ray_address`` which Ray cluster (default: the one this process is connected to,
    or a local instance). ``env_timeout`` bounds every env call (reset, step) in seconds: past it the episode ends
    with ``end_reason="env_error"`` and the worker is replaced (a process or actor killed, a thread abandoned).
    """

    samples_per_prompt: int = 1
    max_context_tokens: int = 4096
    max_completion_tokens: int | None = None
    max_turns: int | None = None
    layout: Layout = "concatenated"
    context: str | int | Summariser | ContextPolicy = "full"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    env_workers: int = 0
    seed: int | None = 0
    env_backend: EnvBackendName = "thread"
    ray_address: str | None = None
    env_timeout: float = DEFAULT_ENV_TIMEOUT

    def __post_init__(self) -> None:
        if self.samples_per_prompt < 1:
            raise ConfigError(f"samples_per_prompt must be >= 1, got {self.samples_per_prompt}")
        if self.layout not in ("concatenated", "step"):
            raise ConfigError(f"layout must be 'concatenated' or 'step', got {self.layout!r}")
        self.context = make_context(self.context)
        if self.layout == "concatenated" and not self.context.full:
            raise ConfigError(
                "layout='concatenated' needs context='full' (one sequence must hold what the model saw);"
                " use layout='step' with last-k or summarised contexts"
            )
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1 or None, got {self.max_turns}")
        if self.max_completion_tokens is not None and self.max_completion_tokens < 1:
            raise ConfigError(f"max_completion_tokens must be >= 1 or None, got {self.max_completion_tokens}")
        if self.max_context_tokens < 2:
            raise ConfigError(f"max_context_tokens must be >= 2, got {self.max_context_tokens}")
        check_env_backend(self.env_backend, self.env_workers, self.ray_address, self.env_timeout)


@dataclass(slots=True)
class Prompt:
    """One task to play: ``gym.make``'s id or a factory, its kwargs, and the reset seed and options."""

    env: str | EnvFactory
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    options: dict[str, Any] | None = None


@dataclass(slots=True)
class _Live:
    """An episode being played."""

    episode: Episode
    slot: int | None  # where its env lives in the env backend; None once released
    messages: list[dict[str, Any]]
    ids: list[int]
    turn: int = 0
    done: bool = False


class RolloutEngine:
    """Plays episodes with a generation backend. ``chat`` is needed for token backends (transformers, vLLM).

    The env backend starts here: an unknown ``env_backend``, a Ray address that cannot be reached or a missing
    ``ray`` extra raise before any episode. :meth:`close` stops its workers.
    """

    def __init__(
        self,
        backend: TokenBackend | ChatBackend,
        chat: ChatTokenizer | None = None,
        config: RolloutConfig | None = None,
    ) -> None:
        self.backend = backend
        self.chat = chat
        self.config = config or RolloutConfig()
        self.token_mode = hasattr(backend, "generate")
        if self.token_mode and chat is None:
            raise ConfigError("a token backend needs chat=ChatTokenizer(tokenizer) to render and tokenize env text")
        self.envs = make_env_backend(
            self.config.env_backend, self.config.env_workers, self.config.ray_address, self.config.env_timeout
        )
        self._slots = itertools.count()
        self._timings: dict[str, float] = {}
        self._rollouts = 0
        # (env, options) -> the options the envs get ("auto" parser resolved), accepted by the env backend
        self._resolved: dict[tuple[str, str], dict[str, Any]] = {}

    # -- public API -------------------------------------------------------------------------------------------------
    def rollout(
        self,
        prompts: Sequence[Prompt | Mapping[str, Any]],
        samples_per_prompt: int | None = None,
    ) -> RolloutBatch:
        """Play ``len(prompts) x samples_per_prompt`` episodes and return them with their training rows."""
        cfg = self.config
        g = cfg.samples_per_prompt if samples_per_prompt is None else samples_per_prompt
        if g < 1:
            raise ConfigError(f"samples_per_prompt must be >= 1, got {g}")
        specs = _group_seeds([p if isinstance(p, Prompt) else Prompt(**p) for p in prompts], cfg.seed)
        for spec in specs:
            # once per env and options: resolving them (a family parser) and pickling them is not free
            if (key := _options_key(spec)) not in self._resolved:
                resolved = resolve_env_kwargs(spec.env_kwargs, self.chat)
                self.envs.check(spec.env, resolved)
                self._resolved[key] = resolved
        self._timings = {"generate": 0.0, "env": 0.0, "tokenize": 0.0}
        self._rollouts += 1
        start = time.perf_counter()
        if cfg.seed is not None and hasattr(self.backend, "reseed"):
            self.backend.reseed(cfg.seed)
        lives = self._start([(i, j, spec) for i, spec in enumerate(specs) for j in range(g)])
        # a backend's rollout session (HFBackend: key/value reuse across turns) spans one rollout, with fixed weights
        session = getattr(self.backend, "rollout_session", contextlib.nullcontext)
        try:
            with session():
                while live := [x for x in lives if not x.done]:
                    self._round(live)
        finally:
            self._release(lives)
        for x in lives:
            if not x.episode.turns and not x.episode.placeholder:
                self._placeholder(x)
        self._timings["total"] = time.perf_counter() - start
        layout = cfg.layout if self.token_mode else "concatenated"
        return RolloutBatch([x.episode for x in lives], layout, dict(self._timings))

    def close(self) -> None:
        """Close every pooled env and stop the env workers."""
        self.envs.close()

    # -- episode start and end --------------------------------------------------------------------------------------
    def _start(self, items: list[tuple[int, int, Prompt]]) -> list[_Live]:
        lives, calls = [], []
        for group, sample, spec in items:
            env_name = spec.env if isinstance(spec.env, str) else getattr(spec.env, "__name__", "factory")
            episode = Episode(f"r{self._rollouts}-g{group}-s{sample}", group, sample, env_name, [], seed=spec.seed)
            lives.append(_Live(episode, next(self._slots), [], []))
            calls.append(
                EnvCall(lives[-1].slot, None, spec.env, self._resolved[_options_key(spec)], spec.seed, spec.options)
            )
        t0 = time.perf_counter()
        replies = self.envs.run(calls)
        self._timings["env"] += time.perf_counter() - t0  # wall time, also when resets run in threads or workers
        for live, reply in zip(lives, replies, strict=True):
            live.episode.task_id = reply.task_id
            if reply.error is not None:  # an env that raises ends its own episode, never the batch
                self._end(live, "env_error", reply.error)
        return [
            self._begin(live, None if r.error else _messages(r, [])) for live, r in zip(lives, replies, strict=True)
        ]

    def _begin(self, live: _Live, messages: list[dict[str, Any]] | None) -> _Live:
        if messages is None:
            return self._placeholder(live)
        live.messages = messages
        if self.token_mode:
            assert self.chat is not None
            t0 = time.perf_counter()
            live.ids = self.chat.prompt_ids(messages)
            self._timings["tokenize"] += time.perf_counter() - t0
            live.episode.prompt_ids = list(live.ids)
            if len(live.ids) >= self.config.max_context_tokens:
                self._end(
                    live,
                    "context_limit",
                    f"the first prompt has {len(live.ids)} tokens, at or over "
                    f"max_context_tokens={self.config.max_context_tokens}",
                )
                return self._placeholder(live)
        return live

    def _placeholder(self, live: _Live) -> _Live:
        """A row a trainer can take without special cases: one masked filler token, reward 0."""
        ep = live.episode
        ep.placeholder, live.done = True, True
        if self.token_mode:
            assert self.chat is not None
            filler = self.chat.pad_token_id
            ep.prompt_ids = ep.prompt_ids[: self.config.max_context_tokens - 1] or [filler]
            ep.turns = [TurnRecord([filler], [0.0], "context", "", len(ep.prompt_ids), trainable=False)]
        else:
            ep.text_only = True
        return live

    def _end(self, live: _Live, reason: EndReason, error: str | None = None) -> None:
        live.done = True
        live.episode.end_reason = reason
        live.episode.error = error
        live.episode.messages = [dict(m) for m in live.messages]

    def _release(self, lives: list[_Live]) -> None:
        """Envs made by id stay in their worker for the next rollout; envs from a factory are closed."""
        self.envs.release([live.slot for live in lives if live.slot is not None])
        for live in lives:
            live.slot = None

    # -- one round: a turn for every live episode, then the env steps -------------------------------------------
    def _round(self, live: list[_Live]) -> None:
        self._step_turns(self._generate_turns(live))

    def _token_limit(self, x: _Live) -> tuple[int, str]:
        """The most tokens the episode's context may hold, and the setting that says so."""
        cfg = self.config
        limit, name = cfg.max_context_tokens, f"max_context_tokens={cfg.max_context_tokens}"
        if cfg.max_completion_tokens is not None and cfg.context.full:
            by_completion = len(x.episode.prompt_ids) + cfg.max_completion_tokens
            if by_completion < limit:
                limit, name = by_completion, f"max_completion_tokens={cfg.max_completion_tokens}"
        return limit, name

    def _generate_turns(self, live: list[_Live]) -> list[tuple[_Live, TurnRecord]]:
        """Sample one turn for every live episode; returns the turns whose actions go to the envs."""
        if not self.token_mode:
            return self._chat_turns(live)
        cfg, chat = self.config, self.chat
        assert chat is not None
        batch: list[tuple[_Live, list[int], int]] = []
        t0 = time.perf_counter()
        for x in live:
            ctx = x.ids if cfg.context.full else chat.prompt_ids(cfg.context.messages(x.messages))
            limit, name = self._token_limit(x)
            room = limit - len(ctx)
            if room < 1:
                self._end(x, "context_limit", f"the context has {len(ctx)} tokens, no room left under {name}")
                continue
            batch.append((x, ctx, min(cfg.sampling.max_new_tokens, room)))
        self._timings["tokenize"] += time.perf_counter() - t0
        if not batch:
            return []
        t0 = time.perf_counter()
        try:
            gens = self.backend.generate([c for _, c, _ in batch], [b for _, _, b in batch], cfg.sampling)
        except Exception as e:  # a failing backend ends the live episodes with the reason; the batch returns
            for x, _, _ in batch:
                self._end(x, "generation_error", f"{type(e).__name__}: {e}")
            return []
        finally:
            self._timings["generate"] += time.perf_counter() - t0
        out = []
        for (x, ctx, budget), gen in zip(batch, gens, strict=True):
            if not gen.ids:
                self._end(x, "generation_error", f"the backend returned no tokens for turn {x.turn}")
                continue
            reason = gen.finish_reason
            if reason == "length" and budget < cfg.sampling.max_new_tokens:
                reason = "context"
            turn = TurnRecord(
                list(gen.ids),
                [float(v) for v in gen.logprobs],
                reason,
                chat.decode_action(gen.ids),
                len(ctx),
                None if cfg.context.full else list(ctx),
            )
            x.episode.turns.append(turn)
            if cfg.context.full:
                x.ids += turn.completion_ids
            if reason == "context":
                self._end(x, "context_limit", f"turn {x.turn} reached {self._token_limit(x)[1]} before it ended")
                continue
            out.append((x, turn))
        return out

    def _chat_turns(self, live: list[_Live]) -> list[tuple[_Live, TurnRecord]]:
        cfg = self.config
        t0 = time.perf_counter()
        try:
            replies = self.backend.chat([cfg.context.messages(x.messages) for x in live], cfg.sampling)
        except Exception as e:
            for x in live:
                self._end(x, "generation_error", f"{type(e).__name__}: {e}")
            return []
        finally:
            self._timings["generate"] += time.perf_counter() - t0
        out = []
        for x, reply in zip(live, replies, strict=True):
            turn = TurnRecord([], list(reply.logprobs or []), reply.finish_reason, reply.text, 0)
            x.episode.turns.append(turn)
            x.episode.text_only = True
            out.append((x, turn))
        return out

    def _step_turns(self, pairs: list[tuple[_Live, TurnRecord]]) -> None:
        """Step each env with its turn's action; record rewards; append the env's reply or end the episode."""
        t0 = time.perf_counter()
        replies = self.envs.run([EnvCall(x.slot, turn.action) for x, turn in pairs])  # type: ignore[arg-type]
        self._timings["env"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for (x, turn), reply in zip(pairs, replies, strict=True):
            self._after_step(x, turn, reply)
        self._timings["tokenize"] += time.perf_counter() - t0

    def _after_step(self, x: _Live, turn: TurnRecord, reply: EnvReply) -> None:
        if reply.error is not None:
            self._end(x, "env_error", reply.error)
            return
        info = reply.info
        turn.reward = reply.reward
        parts = info.get("reward_parts")
        turn.reward_parts = (
            {k: float(v) for k, v in parts.items()} if isinstance(parts, dict) else {"outcome": turn.reward}
        )
        turn.valid, turn.error = bool(info.get("valid", True)), info.get("error")
        x.turn += 1
        history = [*x.messages, {"role": "assistant", "content": turn.action}]
        messages = _messages(reply, history)
        new = messages[len(history) :]
        x.messages = messages
        x.episode.success = bool(info.get("success", False))
        x.episode.metrics = {k: float(v) for k, v in (info.get("metrics") or {}).items()}
        cfg = self.config
        if reply.terminated:
            self._end(x, "terminated")
        elif reply.truncated:
            self._end(x, "turn_limit")
        elif cfg.max_turns is not None and x.turn >= cfg.max_turns:
            self._end(x, "max_turns")
        elif self.token_mode and cfg.context.full:
            self._append_suffix(x, turn, history, new)

    def _append_suffix(
        self, x: _Live, turn: TurnRecord, history: list[dict[str, Any]], new: list[dict[str, Any]]
    ) -> None:
        assert self.chat is not None
        suffix = self.chat.suffix_ids(history, new, turn.completion_ids)
        limit, name = self._token_limit(x)
        if len(x.ids) + len(suffix) + 1 > limit:
            self._end(
                x,
                "context_limit",
                f"the env reply after turn {x.turn - 1} ({len(suffix)} tokens) does not fit under {name}",
            )
            return
        turn.env_ids = suffix
        x.ids += suffix


def _group_seeds(specs: list[Prompt], seed: int | None) -> list[Prompt]:
    """Give every prompt without a seed one drawn for it, so that all samples of a group play the same task."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [
        s if s.seed is not None else Prompt(s.env, s.env_kwargs, int(rng.integers(2**31)), s.options) for s in specs
    ]


def _options_key(spec: Prompt) -> tuple[str, str]:
    """What tells two prompts' env and options apart (their reprs: options hold functions and parser objects)."""
    return repr(spec.env), repr(sorted(spec.env_kwargs.items()))


def _messages(reply: EnvReply, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat form of the episode so far: the env's transcript when it keeps one, else the observations as
    user messages after the previous ones."""
    if reply.messages is not None:
        return reply.messages
    return [*previous, {"role": "user", "content": reply.obs}]
