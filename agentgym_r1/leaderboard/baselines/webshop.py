"""Baselines for ``AgentR1/WebShop-v0``: random clicks, a rule-based shopper, and an oracle.

Written against the env's public contract (issue 5): actions ``search[query]`` and ``click[button]``;
``info["env"]["available_actions"]`` lists what can be done on the page (WebShop's ``{"has_search_bar",
"clickables"}`` or a list of buttons or actions); the instruction is in the observation after ``Instruction:``.
The oracle also reads the page (``info["env"]["page"]`` and ``["asin"]``) and the goal product and options from
``env.unwrapped.task.meta["goal"]``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_r1.error import PolicyError
from agentgym_r1.leaderboard.policies import Policy

NAV = frozenset(
    {"back to search", "next >", "< prev", "description", "features", "reviews", "attributes", "buy now", "search"}
)
_ACTION = re.compile(r"^(search|click)\[(.*)\]$", re.S)
_PRICE = re.compile(r"\[SEP\] (\w{10}) \[SEP\] [^[]*? \[SEP\] \$([\d.]+)")  # a result: asin, title, price


def available(info: dict[str, Any]) -> tuple[bool, list[str]]:
    """Whether a search is possible, and the clickable buttons (in page order)."""
    raw = (info.get("env") or {}).get("available_actions")
    if isinstance(raw, dict):
        return bool(raw.get("has_search_bar")), [str(c) for c in raw.get("clickables", [])]
    can_search, clicks = False, []
    for item in raw or []:
        m = _ACTION.match(str(item))
        if str(item) == "search" or (m and m[1] == "search"):
            can_search = True
        else:
            clicks.append(m[2] if m else str(item))
    return can_search, clicks


def instruction_of(observation: str, env: gym.Env) -> str:
    m = re.search(r"Instruction:\s*(?:\[SEP\]\s*)?(.+?)\s*(?:\[SEP\]|\n|$)", observation)
    if m:
        return m[1].strip()
    task = getattr(env.unwrapped, "task", None)
    return str(getattr(task, "prompt", "") or observation.strip().rsplit("\n", 1)[-1])


def products(clicks: list[str]) -> list[str]:
    return [c for c in clicks if c.lower() not in NAV]


def _has(clicks: list[str], name: str) -> str | None:
    return next((c for c in clicks if c.lower() == name), None)


class _Shopper(Policy):
    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        self.instruction = instruction_of(observation, env)
        self.searched = False
        self.clicked: set[str] = set()

    def search(self, query: str) -> str:
        self.searched = True
        return f"search[{query}]"


class RandomClickPolicy(_Shopper):
    """Searches the instruction (the only thing to do on the search page), then clicks at random."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.base_seed, self.rng = seed, np.random.default_rng(seed)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        can_search, clicks = available(info)
        if can_search and (not clicks or not self.searched):
            return self.search(self.instruction)
        return f"click[{clicks[int(self.rng.integers(len(clicks)))]}]" if clicks else "click[back to search]"


class RuleShopperPolicy(_Shopper):
    """A rule-based shopper that reads only the page: searches the instruction without its price clause, opens the
    first result under the price limit the instruction names (the first result if none is), clicks the options the
    instruction names, buys."""

    name = "rule"

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        limit = re.search(r"price lower than ([\d.]+) dollars", self.instruction.lower())
        self.limit = float(limit[1]) if limit else math.inf

    def act(self, observation: str, info: dict[str, Any]) -> str:
        can_search, clicks = available(info)
        buy = _has(clicks, "buy now")
        if buy:
            wanted = [
                c
                for c in products(clicks)
                if c not in self.clicked
                and re.search(rf"(?<!\w){re.escape(c.lower())}(?!\w)", self.instruction.lower())
            ]
            if wanted:
                self.clicked.add(wanted[0])
                return f"click[{wanted[0]}]"
            return f"click[{buy}]"
        if can_search:
            return self.search(re.split(r",? and price lower than", self.instruction, flags=re.I)[0])
        items = products(clicks)
        if items:
            prices = {a.lower(): float(p) for a, p in _PRICE.findall(observation)}
            cheap = [c for c in items if prices.get(c.lower(), math.inf) < self.limit]
            return f"click[{(cheap or items)[0]}]"
        return f"click[{_has(clicks, '< prev') or _has(clicks, 'back to search') or 'back to search'}]"


class WebShopOraclePolicy(_Shopper):
    """Searches the goal product's title, pages through the results to it, opens it, clicks its goal options and
    buys. An oracle: it reads the goal (``env.unwrapped.task.meta["goal"]``: ``asin``, ``name``, ``goal_options``)."""

    name = "oracle"
    is_oracle = True

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        task = getattr(env.unwrapped, "task", None)
        self.goal = (getattr(task, "meta", None) or {}).get("goal")
        if getattr(self.goal, "asin", None) is None:
            raise PolicyError("the WebShop oracle needs the goal product in env.unwrapped.task.meta['goal']")

    def act(self, observation: str, info: dict[str, Any]) -> str:
        page, asin = info["env"]["page"], self.goal.asin.lower()
        can_search, clicks = available(info)
        if can_search:
            return self.search(self.goal.name)
        if page == "results":
            if asin in clicks:
                return f"click[{asin}]"
            return "click[next >]" if "next >" in clicks else "click[back to search]"
        if page != "item" or info["env"]["asin"].lower() != asin:  # a sub-page, or another product
            return "click[< prev]"
        for _, value in self.goal.goal_options:
            if value not in self.clicked and value in clicks:
                self.clicked.add(value)
                return f"click[{value}]"
        return "click[buy now]"
