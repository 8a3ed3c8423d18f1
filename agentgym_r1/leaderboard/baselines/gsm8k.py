"""Baselines for ``AgentR1/GSM8K-v0``: a scripted calculator agent and an oracle."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentgym_r1.leaderboard.policies import Policy, hermes_call


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
