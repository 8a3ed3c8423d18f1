"""Compiling ALFWorld games ahead, into the on-disk store (:mod:`agentgym_r1.envs.alfworld.compiled`), in worker
processes: above the store and the fast engine, so neither imports the other's user."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_r1.envs.alfworld.compiled import ENV_VAR, GameStore
from agentgym_r1.envs.alfworld.fast import FastEngine
from agentgym_r1.error import AgentGymError, ConfigError, DataNotFoundError


@dataclass
class PrecompileReport:
    """What :func:`precompile` did: games ``compiled`` now, found ``cached``, and ``failed`` (path -> error)."""

    compiled: int = 0
    cached: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def precompile(
    game_files: Iterable[str | os.PathLike[str]], *, workers: int = 1, compile_cache: Any = None
) -> PrecompileReport:
    """Compile ``game_files`` into the store (``compile_cache`` as the env takes it) in ``workers`` spawned
    processes, for the fast engine; games already there are counted ``cached``. A game that cannot be compiled is
    reported in ``failed``, not raised. Blocks until done: run it in a thread to overlap a rollout."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"precompile workers must be a positive int (processes), got {workers!r}")
    if isinstance(game_files, str | os.PathLike):
        raise ConfigError(f"precompile takes a list of game files, got one path {game_files!r}; wrap it in a list")
    files = list(dict.fromkeys(os.path.abspath(os.fspath(p)) for p in game_files))
    missing = [p for p in files if not os.path.isfile(p)]
    if missing:
        raise DataNotFoundError(f"precompile: {len(missing)} game file(s) do not exist, first {missing[0]!r}")
    store = GameStore.resolve(compile_cache)
    if store is None:
        raise ConfigError(
            f"precompile needs a disk cache; compile_cache={compile_cache!r} (or ${ENV_VAR}) turns it off"
        )
    report, start = PrecompileReport(), time.perf_counter()
    if files:
        spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: fast-downward keeps its task in globals
        with ProcessPoolExecutor(max_workers=min(workers, len(files)), mp_context=spawn) as pool:
            chunk = max(1, len(files) // (4 * workers))
            statuses = pool.map(_precompile_one, files, [str(store.root)] * len(files), chunksize=chunk)
            for path, status in zip(files, statuses, strict=True):
                if status in ("compiled", "cached"):
                    setattr(report, status, getattr(report, status) + 1)
                else:
                    report.failed[path] = status
    report.seconds = time.perf_counter() - start
    return report


def _precompile_one(path: str, root: str) -> str:
    """In a worker: ``"cached"``, ``"compiled"``, or the error's text."""
    store = GameStore(Path(root))
    try:
        FastEngine(store).compile(path)
    except AgentGymError as e:
        return f"{type(e).__name__}: {e}"
    if store.stats["write_errors"]:
        return f"compiled but not written under {root!r} (see the worker's warning)"
    return "compiled" if store.stats["compiled"] else "cached"
