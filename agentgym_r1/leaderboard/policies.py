"""Policies: the ``Policy`` base, ``RandomPolicy``, ``hermes_call``, and the registry of named policies per env family
(``POLICY_SPECS``; :func:`agentgym_r1.leaderboard.models.make_policy` makes one by name). The scripted baselines and
oracles live in :mod:`agentgym_r1.leaderboard.baselines`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np


class Policy:
    """Plays one episode at a time: :meth:`reset` at the start, then :meth:`act` for each turn."""

    name = "policy"
    is_oracle = False
    rng: np.random.Generator | None = None  # a policy that draws at random sets it, and base_seed
    base_seed: int = 0

    def seed_episode(self, seed: int) -> None:
        """Start the episode's randomness from the job's seed and the episode's ``seed``: episode ``i`` then plays the
        same whether its run went straight through or was resumed after a kill (one generator for the whole run
        would restart from the job seed on resume)."""
        if self.rng is not None:
            self.rng = np.random.default_rng([self.base_seed % 2**63, seed % 2**63])

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        self.env = env

    def act(self, observation: str, info: dict[str, Any]) -> str:
        raise NotImplementedError

    def close(self) -> None:
        """Free what the policy holds (a connection, a model)."""


class RandomPolicy(Policy):
    """Random text from the env's action space: the floor every agent must beat."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.base_seed, self.rng = seed, np.random.default_rng(seed)

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        env.action_space.seed(int(self.rng.integers(2**31)))

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.env.action_space.sample()


def hermes_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@dataclass(frozen=True)
class PolicySpec:
    """A named policy for one env family: where its class lives (loaded on use), and what kind of baseline it is.

    ``kind`` is ``"random"``, ``"baseline"`` (an honest agent that sees only what a model would see), ``"oracle"``
    (reads the gold task: an upper bound, never a result) or ``"model"``.
    """

    family: str
    name: str
    entry_point: str
    kind: str
    summary: str


_B = "agentgym_r1.leaderboard.baselines"
POLICY_SPECS: tuple[PolicySpec, ...] = (
    PolicySpec("GSM8K", "random", f"{__name__}:RandomPolicy", "random", "random text from the action space"),
    PolicySpec(
        "GSM8K",
        "scripted",
        f"{_B}.gsm8k:CalculatorAgentPolicy",
        "baseline",
        "rule-based ReAct-style reader: one calculator call per sentence, then answers",
    ),
    PolicySpec(
        "GSM8K", "oracle", f"{_B}.gsm8k:GSM8KOraclePolicy", "oracle", "expert expressions, then the gold answer"
    ),
    PolicySpec("PythonMath", "random", f"{__name__}:RandomPolicy", "random", "random text from the action space"),
    PolicySpec(
        "PythonMath",
        "scripted",
        f"{_B}.pythonmath:PythonAgentPolicy",
        "baseline",
        "rule-based reader: one program applying each sentence to a running value, then answers its output",
    ),
    PolicySpec(
        "PythonMath",
        "oracle",
        f"{_B}.pythonmath:PythonMathOraclePolicy",
        "oracle",
        "one program printing the expert values, then the gold answer",
    ),
    PolicySpec("ToolEnv", "random", f"{__name__}:RandomPolicy", "random", "random text from the action space"),
    PolicySpec(
        "ToolEnv",
        "scripted",
        f"{_B}.toolenv:LookupAgentPolicy",
        "baseline",
        "calls the lookup tool with the entity named in the question, answers its result",
    ),
    PolicySpec("ToolEnv", "oracle", f"{_B}.toolenv:AnswerOraclePolicy", "oracle", "answers the gold answer"),
    PolicySpec("HotpotQA", "random", f"{__name__}:RandomPolicy", "random", "random text from the action space"),
    PolicySpec(
        "HotpotQA",
        "rag",
        f"{_B}.hotpotqa:NaiveRAGPolicy",
        "baseline",
        "naive RAG: one search with the question, a rule-based reader over the top passages",
    ),
    PolicySpec(
        "HotpotQA",
        "react",
        f"{_B}.hotpotqa:RuleReActPolicy",
        "baseline",
        "rule-based ReAct: search, find the bridge entity or both compared entities, search again, read",
    ),
    PolicySpec(
        "HotpotQA",
        "oracle",
        f"{_B}.hotpotqa:HotpotQAOraclePolicy",
        "oracle",
        "searches the gold supporting titles, answers the gold answer",
    ),
    PolicySpec("ALFWorld", "random", f"{_B}.alfworld:RandomAdmissiblePolicy", "random", "a random admissible command"),
    PolicySpec(
        "ALFWorld",
        "react",
        f"{_B}.alfworld:RuleReActPolicy",
        "baseline",
        "rule-based ReAct: parse the goal, search receptacles, take, transform, place",
    ),
    PolicySpec("ALFWorld", "oracle", f"{_B}.alfworld:ExpertPlanPolicy", "oracle", "follows the expert plan"),
    PolicySpec(
        "WebShop",
        "random",
        f"{_B}.webshop:RandomClickPolicy",
        "random",
        "searches the instruction, then random available actions",
    ),
    PolicySpec(
        "WebShop",
        "rule",
        f"{_B}.webshop:RuleShopperPolicy",
        "baseline",
        "rule-based: search the instruction, first result under its price limit, options named in it, buy",
    ),
    PolicySpec(
        "WebShop",
        "oracle",
        f"{_B}.webshop:WebShopOraclePolicy",
        "oracle",
        "searches the goal product, clicks it and its goal options, buys",
    ),
)


def env_family(env_id: str) -> str:
    """``"AgentR1/HotpotQA-v0"`` -> ``"HotpotQA"``."""
    return env_id.rpartition("/")[2].rsplit("-v", 1)[0]


def find_policy(spec: str, env_id: str | None = None) -> PolicySpec | None:
    family = env_family(env_id) if env_id else "GSM8K"
    return next((p for p in POLICY_SPECS if p.family == family and p.name == spec), None)


def policy_kind(spec: str, env_id: str | None = None) -> str:
    if spec.startswith(("hf:", "vllm:", "openai:")):
        return "model"
    found = find_policy(spec, env_id)
    return found.kind if found else "unknown"
