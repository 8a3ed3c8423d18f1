"""Shared fixtures: where the shared real data lives, and how to build every registered env for tests."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import pytest

import agentgym_r1

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of pytest-xdist's workers (pyproject's addopts start three)
    # The workers share the machine's cores: torch and BLAS take one thread each unless told otherwise (set before any
    # test module imports torch; subprocesses the tests start inherit it).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

SHARED_DATA = Path(
    os.environ.get("AGENTGYM_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
)


ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str | Path, register: bool = False) -> ModuleType:
    """A fresh copy of one of the repository's scripts (``benchmarks/x.py``, ``examples/x.py``) loaded from its file,
    with module state of its own (caches, provenance), as a run of the script has. ``register`` also puts it in
    ``sys.modules`` under its name, which dataclasses and pickling in the script need."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def shared_data(*parts: str) -> Path:
    """A path under ``../shared/data``; the test skips when the shared data is not beside the checkout."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found at {path} (set AGENTGYM_SHARED_DATA)")
    return path


def _echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: what to echo
    """
    return text


# Keyword arguments that make each registered env runnable offline in tests. An env that needs none is absent.
ENV_KWARGS: dict[str, dict[str, Any]] = {
    "AgentR1/ToolEnv-v0": {
        "tools": [_echo],
        "tasks": [{"prompt": "Say hi.", "answer": "hi"}, {"prompt": "Say bye.", "answer": "bye"}],
    },
    "AgentR1/GSM8K-v0": {"source": "synthetic"},
    "AgentR1/ALFWorld-v0": {"source": "generated", "num_games": 3},
    "AgentR1/ALFWorld-v1": {"source": "generated", "num_games": 3},
}


def make_env(env_id: str, **overrides: Any) -> gym.Env:
    if env_id == "AgentR1/PythonMath-v0":  # its python tool refuses to start without a sandbox
        from agentgym_r1.core.sandbox import bwrap_problem

        problem = bwrap_problem()
        if problem is not None:
            pytest.skip(f"bwrap cannot sandbox here: {problem}")
    return gym.make(env_id, **{**ENV_KWARGS.get(env_id, {}), **overrides})


ALL_ENV_IDS = agentgym_r1.env_ids()


@pytest.fixture(autouse=True, scope="session")
def compiled_games_off_the_users_cache(tmp_path_factory):
    """ALFWorld envs keep compiled games on disk (agentgym_r1.envs.alfworld.compiled), by default in the user's
    cache: the test session keeps them in a temporary directory (inherited by worker processes) unless told where."""
    if os.environ.get("AGENTGYM_R1_COMPILE_CACHE"):
        yield
        return
    os.environ["AGENTGYM_R1_COMPILE_CACHE"] = str(tmp_path_factory.mktemp("compiled-games"))
    yield
    os.environ.pop("AGENTGYM_R1_COMPILE_CACHE", None)


@contextmanager
def deprecations() -> Iterator[list[str]]:
    """Every DeprecationWarning and FutureWarning raised inside the block (each time, whatever the filters said
    before), and transformers' logged deprecations ("... are deprecated"), as ``"Category: message"`` strings.

    transformers logs some deprecations with ``logger.warning_once`` (an ``lru_cache`` over the message,
    ``utils/logging.py``): its cache is cleared first, so a message an earlier test logged is caught again."""
    import logging

    found: list[str] = []

    class Logged(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "deprecated" in record.getMessage():
                found.append(f"{record.name}: {record.getMessage()}")

    logger, handler = logging.getLogger("transformers"), Logged(logging.WARNING)
    once = getattr(logging.Logger, "warning_once", None)  # set when transformers is imported
    if once is not None:
        once.cache_clear()
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
    finally:
        logger.removeHandler(handler)
        found += [
            f"{w.category.__name__}: {w.message}"
            for w in caught
            if issubclass(w.category, (DeprecationWarning, FutureWarning))
        ]
