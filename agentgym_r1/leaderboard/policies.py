"""Scripted policies: they act on an env's text observation (and, for oracles, its task)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_r1.error import ConfigError


class Policy:
    """Plays one episode at a time: :meth:`reset` at the start, then :meth:`act` for each turn."""

    name = "policy"
    is_oracle = False

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        self.env = env

    def act(self, observation: str, info: dict[str, Any]) -> str:
        raise NotImplementedError


class RandomPolicy(Policy):
    """Random text from the env's action space: the floor every agent must beat."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.env.action_space.sample()


def hermes_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class GSM8KOraclePolicy(Policy):
    """Calls the calculator with the task's expert expressions, then answers the gold answer. An oracle."""

    name = "oracle"
    is_oracle = True

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        self.task = env.unwrapped.task
        self.called = False

    def act(self, observation: str, info: dict[str, Any]) -> str:
        expert = self.task.meta.get("expert") or []
        if not self.called and expert:
            self.called = True
            return "".join(hermes_call("calculator", expression=e) for e in expert)
        return f"<answer>{self.task.answer}</answer>"


class CalculatorAgentPolicy(Policy):
    """A scripted, non-oracle GSM8K agent for generated problems: it reads the question in the observation,
    computes each sentence with the calculator, one expression a turn, then answers the last result."""

    name = "scripted"

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        from agentgym_r1.envs.gsm8k.scripted import plan_expressions

        super().reset(env, observation, info)
        self.value, self.plan = plan_expressions(observation.rsplit("\n\n", 1)[-1])

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if observation.startswith("<tool_response>\n"):
            self.value = observation.removeprefix("<tool_response>\n").split("\n</tool_response>", 1)[0]
        if not self.plan or self.value is None:
            return f"<answer>{self.value}</answer>"
        return hermes_call("calculator", expression=self.plan.pop(0)(self.value))


class ALFWorldExpertPolicy(Policy):
    """ALFWorld's planner expert: fast-downward's plan from the current state, played one command a turn and
    replanned when a command did nothing. Sends plain commands, or ``act`` tool calls with ``tool_call=True``.
    An oracle: it reads the game's state through the engine."""

    name = "alfworld-expert"
    is_oracle = True

    def __init__(self, tool_call: bool = False) -> None:
        self.tool_call = tool_call

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        self.plan: list[str] = []

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self.plan or info.get("valid") is False:
            self.plan = self.env.unwrapped.expert_plan()
        command = self.plan.pop(0) if self.plan else "look"
        return hermes_call("act", command=command) if self.tool_call else command


POLICIES: dict[str, Callable[[], Policy]] = {
    "random": RandomPolicy,
    "oracle": GSM8KOraclePolicy,
    "scripted": CalculatorAgentPolicy,
}


def make_policy(spec: str) -> Policy:
    if spec not in POLICIES:
        raise ConfigError(f"unknown policy {spec!r}; choose one of {sorted(POLICIES)}")
    return POLICIES[spec]()
