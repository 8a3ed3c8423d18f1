"""Baselines for ``AgentR1/WebShop-v0``: random clicks, WebShop's rule baseline, and an oracle.

Written against the env's public contract (issue 5): actions ``search[query]`` and ``click[button]``;
``info["env"]["available_actions"]`` lists what can be done on the page (WebShop's ``{"has_search_bar",
"clickables"}`` or a list of buttons or actions); the instruction is in the observation after ``Instruction:``.
The oracle reads the goal product and options from ``env.unwrapped.task.meta``.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_r1.error import PolicyError
from agentgym_r1.leaderboard.policies import Policy

NAV = frozenset({"back to search", "next >", "< prev", "description", "features", "reviews", "attributes",
                 "buy now", "search"})
_ACTION = re.compile(r"^(search|click)\[(.*)\]$", re.S)


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
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        can_search, clicks = available(info)
        if can_search and (not clicks or not self.searched):
            return self.search(self.instruction)
        return f"click[{clicks[int(self.rng.integers(len(clicks)))]}]" if clicks else "click[back to search]"


class RuleShopperPolicy(_Shopper):
    """WebShop's rule baseline: search the instruction, open the first result, click the options the instruction
    names, buy."""

    name = "rule"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        can_search, clicks = available(info)
        buy = _has(clicks, "buy now")
        if buy:
            wanted = [c for c in products(clicks) if c not in self.clicked
                      and re.search(rf"\b{re.escape(c.lower())}\b", self.instruction.lower())]
            if wanted:
                self.clicked.add(wanted[0])
                return f"click[{wanted[0]}]"
            return f"click[{buy}]"
        if can_search and not self.searched:
            return self.search(self.instruction)
        items = products(clicks)
        if items:
            return f"click[{items[0]}]"
        return f"click[{_has(clicks, 'back to search') or 'back to search'}]"


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        value = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
        if value:
            return value
    return None


def _goal(meta: Any) -> tuple[str | None, list[str], str | None]:
    """The goal's asin, option values and a query for it, from ``meta["goal"]`` (a dict or an object) or ``meta``."""
    goal = _get(meta, "goal") or meta
    asin = _get(goal, "asin", "product_id")
    options = _get(goal, "goal_options", "options") or []
    if isinstance(options, dict):
        options = list(options.values())
    values = [str(o[1]) if isinstance(o, list | tuple) else str(o) for o in options]
    query = _get(goal, "name", "title", "product_title", "query")
    return (str(asin) if asin else None), values, (str(query) if query else None)


class WebShopOraclePolicy(_Shopper):
    """Searches for the goal product, pages to it, clicks it and its goal options, buys. An oracle."""

    name = "oracle"
    is_oracle = True

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        task = getattr(env.unwrapped, "task", None)
        self.asin, self.options, self.query = _goal(getattr(task, "meta", None) or {})
        if self.asin is None:
            raise PolicyError("the WebShop oracle needs the goal product's asin in env.unwrapped.task.meta")
        self.pages = 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        can_search, clicks = available(info)
        lower = {c.lower(): c for c in clicks}
        if _has(clicks, "buy now"):
            option = next((lower[o.lower()] for o in self.options
                           if o.lower() in lower and lower[o.lower()] not in self.clicked), None)
            if option:
                self.clicked.add(option)
                return f"click[{option}]"
            return f"click[{lower['buy now']}]"
        if can_search and not self.searched:
            return self.search(self.query or self.instruction)
        if self.asin.lower() in lower:
            return f"click[{lower[self.asin.lower()]}]"
        if "next >" in lower and self.pages < 10:
            self.pages += 1
            return f"click[{lower['next >']}]"
        items = products(clicks)
        return f"click[{items[0]}]" if items else "click[back to search]"
