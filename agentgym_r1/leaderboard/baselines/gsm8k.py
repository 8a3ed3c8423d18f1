"""Baselines for ``AgentR1/GSM8K-v0``: a scripted calculator agent and an oracle."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentgym_r1.leaderboard.policies import Policy, hermes_call


class GSM8KOraclePolicy(Policy):
    """Plays the task's expert episode (every calculator call in the first turn), then the gold answer. An oracle."""

    name = "oracle"
    is_oracle = True

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        from agentgym_r1.envs.gsm8k.expert import expert_actions

        super().reset(env, observation, info)
        *calls, answer = expert_actions(env.unwrapped.task)
        # every call in one turn, so that real problems with many steps fit the env's turn limit
        self.actions = ["".join(calls), answer] if calls else [answer]

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]


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
