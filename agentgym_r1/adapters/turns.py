"""One round of the rollout engine: a turn for every live episode, then the env steps.

Split from :mod:`agentgym_r1.adapters.rollout` to keep each module short; these functions work on the engine's
live episodes and are not a public API.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from agentgym_r1.adapters.records import TurnRecord

if TYPE_CHECKING:
    from agentgym_r1.adapters.rollout import RolloutEngine, _Live


def generate_turns(engine: RolloutEngine, live: list[_Live]) -> list[tuple[_Live, TurnRecord]]:
    """Sample one turn for every live episode; returns the turns whose actions go to the envs."""
    if not engine.token_mode:
        return _chat_turns(engine, live)
    cfg, chat = engine.config, engine.chat
    assert chat is not None
    batch: list[tuple[_Live, list[int], int]] = []
    t0 = time.perf_counter()
    for x in live:
        ctx = x.ids if cfg.context.full else chat.prompt_ids(cfg.context.messages(x.messages))
        room = cfg.max_context_tokens - len(ctx)
        if room < 1:
            engine._end(x, "context_limit", f"the context has {len(ctx)} tokens, no room left under "
                                            f"max_context_tokens={cfg.max_context_tokens}")
            continue
        batch.append((x, ctx, min(cfg.sampling.max_new_tokens, room)))
    engine._timings["tokenize"] += time.perf_counter() - t0
    if not batch:
        return []
    t0 = time.perf_counter()
    try:
        gens = engine.backend.generate([c for _, c, _ in batch], [b for _, _, b in batch], cfg.sampling)
    except Exception as e:  # a failing backend ends the live episodes with the reason; the batch returns
        for x, _, _ in batch:
            engine._end(x, "generation_error", f"{type(e).__name__}: {e}")
        return []
    finally:
        engine._timings["generate"] += time.perf_counter() - t0
    out = []
    for (x, ctx, budget), gen in zip(batch, gens, strict=True):
        if not gen.ids:
            engine._end(x, "generation_error", f"the backend returned no tokens for turn {x.turn}")
            continue
        reason = gen.finish_reason
        if reason == "length" and budget < cfg.sampling.max_new_tokens:
            reason = "context"
        turn = TurnRecord(list(gen.ids), [float(v) for v in gen.logprobs], reason, chat.decode_action(gen.ids),
                          len(ctx), None if cfg.context.full else list(ctx))
        x.episode.turns.append(turn)
        if cfg.context.full:
            x.ids += turn.completion_ids
        if reason == "context":
            engine._end(x, "context_limit", f"turn {x.turn} reached max_context_tokens={cfg.max_context_tokens} "
                                            "before it ended")
            continue
        out.append((x, turn))
    return out


def _chat_turns(engine: RolloutEngine, live: list[_Live]) -> list[tuple[_Live, TurnRecord]]:
    cfg = engine.config
    t0 = time.perf_counter()
    try:
        replies = engine.backend.chat([cfg.context.messages(x.messages) for x in live], cfg.sampling)
    except Exception as e:
        for x in live:
            engine._end(x, "generation_error", f"{type(e).__name__}: {e}")
        return []
    finally:
        engine._timings["generate"] += time.perf_counter() - t0
    out = []
    for x, reply in zip(live, replies, strict=True):
        turn = TurnRecord([], list(reply.logprobs or []), reply.finish_reason, reply.text, 0)
        x.episode.turns.append(turn)
        x.episode.text_only = True
        out.append((x, turn))
    return out


def step_turns(engine: RolloutEngine, pairs: list[tuple[_Live, TurnRecord]]) -> None:
    """Step each env with its turn's action; record rewards; append the env's reply or end the episode."""
    t0 = time.perf_counter()
    results = engine._map(lambda p: _step(p[0], p[1].action), pairs)
    engine._timings["env"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    for (x, turn), result in zip(pairs, results, strict=True):
        _after_step(engine, x, turn, result)
    engine._timings["tokenize"] += time.perf_counter() - t0


def _step(x: _Live, action: str) -> tuple[Any, ...] | BaseException:
    try:
        assert x.env is not None
        return x.env.step(action)
    except Exception as e:  # an env that raises ends its own episode
        return e


def _after_step(engine: RolloutEngine, x: _Live, turn: TurnRecord, result: tuple[Any, ...] | BaseException) -> None:
    from agentgym_r1.adapters.rollout import _messages

    if isinstance(result, BaseException):
        engine._end(x, "env_error", f"step raised {type(result).__name__}: {result}")
        return
    obs, reward, terminated, truncated, info = result
    turn.reward = float(reward)
    parts = info.get("reward_parts")
    turn.reward_parts = {k: float(v) for k, v in parts.items()} if isinstance(parts, dict) else {"outcome": turn.reward}
    turn.valid, turn.error = bool(info.get("valid", True)), info.get("error")
    x.turn += 1
    history = [*x.messages, {"role": "assistant", "content": turn.action}]
    assert x.env is not None
    messages = _messages(x.env, obs, history)
    new = messages[len(history):]
    x.messages = messages
    x.episode.success = bool(info.get("success", False))
    x.episode.metrics = {k: float(v) for k, v in (info.get("metrics") or {}).items()}
    cfg = engine.config
    if terminated:
        engine._end(x, "terminated")
    elif truncated:
        engine._end(x, "turn_limit")
    elif cfg.max_turns is not None and x.turn >= cfg.max_turns:
        engine._end(x, "max_turns")
    elif engine.token_mode and cfg.context.full:
        _append_suffix(engine, x, turn, history, new)


def _append_suffix(engine: RolloutEngine, x: _Live, turn: TurnRecord, history: list[dict[str, Any]],
                   new: list[dict[str, Any]]) -> None:
    assert engine.chat is not None
    last = turn.completion_ids[-1] if turn.completion_ids else None
    suffix = engine.chat.suffix_ids(history, new, last)
    limit = engine.config.max_context_tokens
    if len(x.ids) + len(suffix) + 1 > limit:
        engine._end(x, "context_limit", f"the env reply after turn {x.turn - 1} ({len(suffix)} tokens) does not fit "
                                        f"under max_context_tokens={limit}")
        return
    turn.env_ids = suffix
    x.ids += suffix
