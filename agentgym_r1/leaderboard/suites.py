"""The evaluation suites: which envs, on which offline sources, with which baselines and how many episodes.

``quick`` (the README's main job) runs in a few minutes on a laptop CPU, on the generated sources' default ``easy``
level, and trains a tiny agent on GSM8K in the run (:data:`TRAINED_ENTRY`, :mod:`agentgym_r1.leaderboard.training`);
``full`` runs enough episodes for tight confidence intervals, at every difficulty level (``easy``, ``medium``,
``hard``). Both name all five envs with their offline sources; an env id that is not registered in this checkout is
recorded as skipped, with the reason, and the rest of the suite runs.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    env_kwargs: tuple[tuple[str, Any], ...] = ()  # options beyond the source (the difficulty level)
    train: bool = False  # a tiny agent is trained in the run and its rows stand beside these baselines


# The trained agent's env (:mod:`agentgym_r1.leaderboard.training`): GSM8K's synthetic source with one calculator step
# per problem and a one-line system prompt, as in benchmarks/train_gsm8k_proof.py. Training draws its tasks from the
# generator seeded 0; the board's episodes come from the generator seeded 3, which training never sees (seed 1 scored
# the first protocol's runs and seed 2 is the development set: benchmarks/reports/main_job.md).
TRAINED_TASK_OPTIONS: dict[str, Any] = {"min_steps": 1, "max_steps": 1, "system_prompt": "Solve it."}
TRAINED_HELD_OUT_OPTIONS: dict[str, Any] = {**TRAINED_TASK_OPTIONS, "seed": 3}
TRAINED_ENTRY = SuiteEntry(
    "AgentR1/GSM8K-v0",
    "synthetic",
    1024,
    ("random", "scripted", "oracle"),
    tuple(TRAINED_HELD_OUT_OPTIONS.items()),
    train=True,
)


def _entries(scale: int, levels: tuple[str, ...]) -> tuple[SuiteEntry, ...]:
    """The suite at ``scale`` times the quick episode counts; the generated sources at each of ``levels``
    (``easy`` is their default, so it is given as no option: its runs are the same as before levels existed)."""

    def at(level: str) -> tuple[tuple[str, Any], ...]:
        return () if level == "easy" else (("difficulty", level),)

    return (
        *(
            SuiteEntry("AgentR1/GSM8K-v0", "synthetic", 50 * scale, ("random", "scripted", "oracle"), at(lv))
            for lv in levels
        ),
        SuiteEntry("AgentR1/ToolEnv-v0", "lookup", 20 * scale, ("random", "scripted", "oracle")),
        *(
            SuiteEntry("AgentR1/HotpotQA-v0", "synthetic", 30 * scale, ("random", "rag", "react", "oracle"), at(lv))
            for lv in levels
        ),
        *(
            SuiteEntry("AgentR1/ALFWorld-v1", "generated", 6 * scale, ("random", "react", "oracle"), at(lv))
            for lv in levels
        ),
        *(
            SuiteEntry("AgentR1/WebShop-v0", "generated", 30 * scale, ("random", "rule", "oracle"), at(lv))
            for lv in levels
        ),
    )


# GSM8K with the sandboxed python tool (``full`` only: each call starts a sandboxed interpreter, ~0.1 s).
PYTHON_MATH = tuple(
    SuiteEntry(
        "AgentR1/PythonMath-v0",
        "synthetic",
        200,
        ("random", "scripted", "oracle"),
        () if level == "easy" else (("difficulty", level),),
    )
    for level in ("easy", "medium", "hard")
)


SUITES: dict[str, tuple[SuiteEntry, ...]] = {
    "quick": (*_entries(1, ("easy",)), TRAINED_ENTRY),
    "full": (*_entries(10, ("easy", "medium", "hard")), *PYTHON_MATH),
}


def suite(name: str) -> tuple[SuiteEntry, ...]:
    if name not in SUITES:
        raise ConfigError(f"unknown suite {name!r}; choose one of {sorted(SUITES)}")
    return SUITES[name]


def is_registered(env_id: str) -> bool:
    import agentgym_r1  # noqa: F401  (registers the env ids)

    return env_id in gym.registry


def not_registered_message(env_id: str) -> str:
    import agentgym_r1

    return f"{env_id} is not registered in this checkout (registered: {', '.join(agentgym_r1.env_ids())}); skipped"


def env_kwargs(env_id: str, source: str | None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Constructor options for ``env_id`` on ``source``, with ``extra`` (``--env-kwargs``) over them. ToolEnv's
    ``lookup`` source is built here."""
    if env_id == "AgentR1/ToolEnv-v0" and source in (None, "lookup"):
        from agentgym_r1.leaderboard.baselines.toolenv import lookup_kwargs

        return {**lookup_kwargs(), **(extra or {})}
    return {**({} if source is None else {"source": source}), **(extra or {})}


def make_env(env_id: str, source: str | None, extra: Mapping[str, Any] | None = None) -> gym.Env:
    """The env for ``env_id`` on ``source``; a :class:`ConfigError` naming the registered ids if it is unknown."""
    if not is_registered(env_id):
        raise ConfigError(f"unknown env id {env_id!r}: {not_registered_message(env_id).removesuffix('; skipped')}")
    return gym.make(env_id, **env_kwargs(env_id, source, extra))


def parse_env_kwargs(text: str | None) -> dict[str, Any]:
    """``--env-kwargs JSON``: a JSON object of constructor options, e.g. ``'{"difficulty": "hard"}'``."""
    if not text:
        return {}
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f'--env-kwargs must be a JSON object such as \'{{"difficulty": "hard"}}\'; {text!r} is not JSON ({e.msg})'
        ) from e
    if not isinstance(value, dict):
        raise ConfigError(f'--env-kwargs must be a JSON object such as \'{{"difficulty": "hard"}}\', got {text!r}')
    if "source" in value:
        raise ConfigError("give the source with --source (eval) or by the suite, not in --env-kwargs")
    return value


def options_label(env_kwargs: str) -> str:
    """How the board shows a run's env options: ``difficulty=hard``; a dict value as compact JSON."""
    if not env_kwargs:
        return ""
    import json

    return " ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
        for k, v in json.loads(env_kwargs).items()
    )
