"""Baselines for ``AgentR1/ALFWorld-v1`` (and ``-v0``): a random admissible command, a rule-based ReAct agent, and
the expert plan.

Written against the env's public contract (issue 4): the observation is ALFWorld's text (the goal as ``Your task is
to: ...`` at reset), an action is one ALFWorld command as plain text, and ``info["env"]`` carries the admissible
commands. The oracle follows the env's expert (``env.unwrapped.expert_plan()``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_r1.error import PolicyError
from agentgym_r1.leaderboard.policies import Policy, hermes_call

ADMISSIBLE_KEYS = ("admissible_commands", "admissible", "available_actions", "valid_actions")
TOOLS = {
    "clean": ("clean", "sinkbasin"),
    "hot": ("heat", "microwave"),
    "heat": ("heat", "microwave"),
    "cool": ("cool", "fridge"),
}


def admissible(info: dict[str, Any]) -> list[str]:
    extra = info.get("env") or {}
    for key in ADMISSIBLE_KEYS:
        if isinstance(extra.get(key), list | tuple):
            return [str(c) for c in extra[key]]
    return []


@dataclass
class Goal:
    obj: str
    target: str | None
    transform: str | None = None  # clean | hot | cool
    count: int = 1
    lamp: str | None = None


_GOALS = (
    (
        re.compile(r"(?:look at|examine) (?:the |a |an |some )?(\w+) (?:under|with) the (\w+)"),
        lambda m: Goal(m[1], None, lamp=m[2]),
    ),
    (
        re.compile(r"(?:put|find) two (\w+?)s? (?:and put them )?(?:in|on|in/on) (?:the |a |an )?(\w+)"),
        lambda m: Goal(m[1], m[2], count=2),
    ),
    (
        re.compile(r"put (?:a |an |some |the )?(clean|hot|cool) (\w+) (?:in|on|in/on) (?:the |a |an )?(\w+)"),
        lambda m: Goal(m[2], m[3], m[1]),
    ),
    (
        re.compile(r"(clean|heat|cool) (?:a |an |some |the )?(\w+) and put it (?:in|on|in/on) (?:the |a |an )?(\w+)"),
        lambda m: Goal(m[2], m[3], m[1]),
    ),
    (re.compile(r"put (?:a |an |some |the )?(\w+) (?:in|on|in/on) (?:the |a |an )?(\w+)"), lambda m: Goal(m[1], m[2])),
)


def parse_goal(text: str) -> Goal | None:
    m = re.search(r"your task is to:\s*(.+)", text, re.I)
    if not m:
        return None
    task = m[1].strip().lower()
    for pattern, make in _GOALS:
        if g := pattern.search(task):
            return make(g)
    return None


def _obj_type(name: str) -> str:
    return re.sub(r"\s*\d+$", "", name)


class RandomAdmissiblePolicy(Policy):
    """A random admissible command (``look`` if the env lists none)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.base_seed, self.rng = seed, np.random.default_rng(seed)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        commands = [c for c in admissible(info) if c not in ("inventory", "help")]
        return str(commands[int(self.rng.integers(len(commands)))]) if commands else "look"


class RuleReActPolicy(Policy):
    """Parse the goal; visit receptacles in turn (opening closed ones) until the object is seen; take it; clean,
    heat or cool it at the sink, microwave or fridge; put it in the target (twice for *two*), or use the lamp."""

    name = "react"

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        self.goal = parse_goal(observation)
        self.holding: str | None = None
        self.done_transform = False
        self.placed: set[str] = set()
        self.visited: list[str] = []
        self.opened: set[str] = set()
        self.last = ""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        self._observe(observation)
        commands = admissible(info)
        action = self._choose(commands) if self.goal else None
        self.last = action or "look"
        return self.last

    def _observe(self, observation: str) -> None:
        failed = "nothing happens" in observation.lower()
        verb, _, rest = self.last.partition(" ")
        if failed or not self.last:
            return
        if verb == "take":
            self.holding, self.done_transform = rest.split(" from ")[0], False
        elif verb in ("put", "move"):
            self.placed.add(self.holding or "")
            self.holding = None
        elif verb in ("clean", "heat", "cool"):
            self.done_transform = True
        elif verb == "open":
            self.opened.add(rest)

    def _choose(self, commands: list[str]) -> str | None:
        g = self.goal
        assert g is not None
        if self.holding:
            if g.lamp:
                return self._find(commands, f"use {g.lamp}") or self._explore(commands)
            if g.transform and not self.done_transform:
                verb, place = TOOLS[g.transform]
                return self._find(commands, f"{verb} {self.holding} with") or self._go(commands, place)
            put = next(
                (
                    c
                    for c in commands
                    if c.startswith((f"put {self.holding} ", f"move {self.holding} ")) and g.target and g.target in c
                ),
                None,
            )
            return put or self._go(commands, g.target or "")
        take = next(
            (
                c
                for c in commands
                if c.startswith("take ")
                and _obj_type(c[5:].split(" from ")[0]) == g.obj
                and c[5:].split(" from ")[0] not in self.placed
                and not (g.target and c.split(" from ")[-1].startswith(g.target))
            ),
            None,
        )
        return take or self._open_here(commands) or self._explore(commands)

    def _find(self, commands: list[str], prefix: str) -> str | None:
        return next((c for c in commands if c.startswith(prefix)), None)

    def _go(self, commands: list[str], place: str) -> str | None:
        here = self.visited[-1] if self.visited else ""
        if here.startswith(place):
            return self._open_here(commands) or self._explore(commands)
        go = self._find(commands, f"go to {place}")
        if go:
            self.visited.append(go[6:])
        return go or self._explore(commands)

    def _open_here(self, commands: list[str]) -> str | None:
        here = self.visited[-1] if self.visited else None
        return f"open {here}" if here and f"open {here}" in commands and here not in self.opened else None

    def _explore(self, commands: list[str]) -> str:
        goes = [c for c in commands if c.startswith("go to ")]
        fresh = [c for c in goes if c[6:] not in self.visited]
        choice = (fresh or goes or ["look"])[0]
        if choice.startswith("go to "):
            if not fresh:
                self.visited.clear()
            self.visited.append(choice[6:])
        return choice


class ExpertPlanPolicy(Policy):
    """ALFWorld's expert (``env.unwrapped.expert_plan()``: the game's walkthrough or the scripted full-knowledge
    plan, fast-downward's plan after a detour), one command a turn, asked again when a command did nothing. Sends
    plain commands, or ``act`` tool calls with ``tool_call=True``. An oracle: it reads the game's state."""

    name = "oracle"
    is_oracle = True

    def __init__(self, tool_call: bool = False) -> None:
        self.tool_call = tool_call

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        if not callable(getattr(env.unwrapped, "expert_plan", None)):
            raise PolicyError(
                f"the ALFWorld oracle needs env.unwrapped.expert_plan(); {type(env.unwrapped).__name__} has none"
            )
        self.plan: list[str] = []

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self.plan or info.get("valid") is False:
            self.plan = list(self.env.unwrapped.expert_plan())
        command = self.plan.pop(0) if self.plan else "look"
        return hermes_call("act", command=command) if self.tool_call else command
