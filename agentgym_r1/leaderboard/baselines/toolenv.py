"""An offline benchmark for ``AgentR1/ToolEnv-v0`` and its baselines.

``source="lookup"``: a generated table of fictional cities and their populations behind a ``lookup`` tool; each task
asks for one city's population, so the agent must call the tool and answer what it returned. Seeded and pure: task
``i`` of seed ``s`` is always the same.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_r1.core.tasks import Task
from agentgym_r1.leaderboard.policies import Policy, hermes_call

_SYLLABLES = ("ka", "lo", "mi", "ra", "ven", "tor", "sel", "dun", "bar", "qui", "zel", "mor", "thi", "pa", "gro")


def _city(rng: np.random.Generator) -> str:
    return "".join(str(s) for s in rng.choice(_SYLLABLES, size=int(rng.integers(2, 4)))).capitalize()


def lookup_table(seed: int = 0, size: int = 200) -> dict[str, str]:
    rng = np.random.default_rng([seed, 0x10C])
    table: dict[str, str] = {}
    while len(table) < size:
        table.setdefault(_city(rng), f"{int(rng.integers(1_000, 9_000_000)):,}")
    return table


def lookup_kwargs(seed: int = 0, size: int = 200) -> dict[str, Any]:
    """Constructor options for ``gym.make("AgentR1/ToolEnv-v0", **lookup_kwargs())``."""
    table = lookup_table(seed, size)

    def lookup(city: str) -> str:
        """The population of a city.

        Args:
            city: the city's name, e.g. Kalo
        """
        return table.get(city.strip().capitalize(), f"no city named {city!r}")

    tasks = [
        Task(
            f"lookup-{i}", f"What is the population of {city}? Answer with the number as the tool gives it.", population
        )
        for i, (city, population) in enumerate(table.items())
    ]
    return {"tools": [lookup], "tasks": tasks}


class LookupAgentPolicy(Policy):
    """Reads the city's name from the question, calls ``lookup`` with it, answers the tool's result."""

    name = "scripted"

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        m = re.search(r"population of ([A-Z]\w+)\?", observation)
        self.city = m[1] if m else None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if observation.startswith("<tool_response>"):
            return (
                f"<answer>{observation.split('<tool_response>', 1)[1].split('</tool_response>', 1)[0].strip()}</answer>"
            )
        if self.city is None:
            return "<answer>unknown</answer>"
        return hermes_call("lookup", city=self.city)


class AnswerOraclePolicy(Policy):
    """Answers the task's gold answer at once. An oracle."""

    name = "oracle"
    is_oracle = True

    def act(self, observation: str, info: dict[str, Any]) -> str:
        answer = self.env.unwrapped.task.answer
        return f"<answer>{answer[0] if isinstance(answer, list) else answer}</answer>"
