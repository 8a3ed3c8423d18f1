"""Baselines for ``AgentR1/PythonMath-v0``: a scripted program-writing agent and an oracle."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentgym_r1.leaderboard.policies import Policy, hermes_call


class PythonMathOraclePolicy(Policy):
    """One python call printing the reference solution's values, then the gold answer. An oracle."""

    name = "oracle"
    is_oracle = True

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        from agentgym_r1.envs.pythonmath import expert_actions

        super().reset(env, observation, info)
        self.actions = expert_actions(env.unwrapped.task)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]


class PythonAgentPolicy(Policy):
    """A scripted, non-oracle agent for generated problems: it reads the question, writes one program that applies
    each sentence to a running value (the GSM8K scripted reader's plan, as Python), runs it, then answers what it
    printed."""

    name = "scripted"

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        from agentgym_r1.envs.gsm8k.scripted import plan_expressions

        super().reset(env, observation, info)
        start, plan = plan_expressions(observation.rsplit("\n\n", 1)[-1])
        lines = [f"v = {start}", *(f"v = {step('v')}" for step in plan), "print(int(v) if v == int(v) else v)"]
        self.program = "\n".join(lines) if start is not None else None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self.program is not None:
            program, self.program = self.program, None
            return hermes_call("python", code=program)
        printed = observation.removeprefix("<tool_response>\n").split("\n</tool_response>", 1)[0].strip()
        return f"<answer>{printed.splitlines()[-1] if printed else 'None'}</answer>"
