"""The evaluation suites: which envs, on which offline sources, with which baselines and how many episodes.

``quick`` (the README's main job) runs in a few minutes on a laptop CPU; ``full`` runs enough episodes for tight
confidence intervals. Both name all five envs with their offline sources; an env id that is not registered in this
checkout is recorded as skipped, with the reason, and the rest of the suite runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agentgym_r1.error import ConfigError


@dataclass(frozen=True)
class SuiteEntry:
    env_id: str
    source: str
    episodes: int
    policies: tuple[str, ...]


def _entries(scale: int) -> tuple[SuiteEntry, ...]:
    return (
        SuiteEntry("AgentR1/GSM8K-v0", "synthetic", 50 * scale, ("random", "scripted", "oracle")),
        SuiteEntry("AgentR1/ToolEnv-v0", "lookup", 20 * scale, ("random", "scripted", "oracle")),
        SuiteEntry("AgentR1/HotpotQA-v0", "synthetic", 30 * scale, ("random", "rag", "react", "oracle")),
        SuiteEntry("AgentR1/ALFWorld-v1", "generated", 6 * scale, ("random", "react", "oracle")),
        SuiteEntry("AgentR1/WebShop-v0", "generated", 30 * scale, ("random", "rule", "oracle")),
    )


SUITES: dict[str, tuple[SuiteEntry, ...]] = {"quick": _entries(1), "full": _entries(10)}


def suite(name: str) -> tuple[SuiteEntry, ...]:
    if name not in SUITES:
        raise ConfigError(f"unknown suite {name!r}; choose one of {sorted(SUITES)}")
    return SUITES[name]


def is_registered(env_id: str) -> bool:
    import agentgym_r1  # noqa: F401  (registers the env ids)

    return env_id in gym.registry


def not_registered_message(env_id: str) -> str:
    import agentgym_r1

    return (f"{env_id} is not registered in this checkout (registered: {', '.join(agentgym_r1.env_ids())}); "
            f"skipped")


def env_kwargs(env_id: str, source: str | None) -> dict[str, Any]:
    """Constructor options for ``env_id`` on ``source``. ToolEnv's ``lookup`` source is built here."""
    if env_id == "AgentR1/ToolEnv-v0" and source in (None, "lookup"):
        from agentgym_r1.leaderboard.baselines.toolenv import lookup_kwargs

        return lookup_kwargs()
    return {} if source is None else {"source": source}


def make_env(env_id: str, source: str | None) -> gym.Env:
    """The env for ``env_id`` on ``source``; a :class:`ConfigError` naming the registered ids if it is unknown."""
    if not is_registered(env_id):
        raise ConfigError(f"unknown env id {env_id!r}: {not_registered_message(env_id).removesuffix('; skipped')}")
    return gym.make(env_id, **env_kwargs(env_id, source))
