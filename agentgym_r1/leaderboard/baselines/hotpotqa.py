"""Baselines for ``AgentR1/HotpotQA-v0``: naive RAG, a rule-based ReAct agent, and an oracle.

Written against the env's public contract (issue 3): a ``search`` tool with a ``query`` argument, called as a Hermes
tool call (results in ``<tool_response>``) or as a Search-R1 tag ``<search>q</search>`` (results in
``<information>``); the answer in ``<answer>...</answer>``; the question is the last paragraph of the first
observation. The oracle reads ``env.unwrapped.task`` (``answer``, and the supporting titles in ``meta``).
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from agentgym_r1.error import PolicyError
from agentgym_r1.leaderboard.baselines.reader import (
    Passage,
    best_sentences,
    candidates,
    comparison_options,
    read,
    split_passages,
)
from agentgym_r1.leaderboard.policies import Policy, hermes_call

_RESULT = re.compile(r"<(tool_response|information)>\s*(.*?)\s*</\1>", re.S)


def question_of(observation: str) -> str:
    last = observation.strip().rsplit("\n\n", 1)[-1].strip()
    return re.sub(r"^(?:question|q)\s*:\s*", "", last, flags=re.I)


def results_of(observation: str) -> list[Passage]:
    return [p for m in _RESULT.finditer(observation) for p in split_passages(m[2])]


class _SearchPolicy(Policy):
    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        self.question = question_of(observation)
        self.tags = "<tool_call>" not in observation and "<search>" in observation
        self.passages: list[Passage] = []
        self.searched = False

    def search(self, query: str) -> str:
        return f"<search>{query}</search>" if self.tags else hermes_call("search", query=query)

    def answer(self, text: str) -> str:
        return f"<answer>{text}</answer>"


class NaiveRAGPolicy(_SearchPolicy):
    """Retrieve once with the question, answer from the top passages with the rule-based reader."""

    name = "rag"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self.searched:
            self.searched = True
            return self.search(self.question)
        return self.answer(read(self.question, results_of(observation)))


class RuleReActPolicy(_SearchPolicy):
    """ReAct by rules. Search the question. A comparison (*A or B?*, *are A and B ...?*): search each entity, then
    compare. A bridge question: take the name the best-matching sentence adds to the question (the bridge entity,
    e.g. a film's director), search that name, and read its passage for the answer (never the bridge itself)."""

    name = "react"

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        options = comparison_options(self.question) or both_entities(self.question)
        self.queue = list(options) if options else [self.question]
        self.bridge: str | None = None
        self.bridge_done = bool(options)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        found = results_of(observation)
        self.passages = found + [p for p in self.passages if p not in found] if self.bridge else self.passages + found
        if self.queue:
            return self.search(self.queue.pop(0))
        if not self.bridge_done:
            self.bridge_done = True
            self.bridge = next(
                (
                    c
                    for s in best_sentences(self.question, self.passages, k=1)
                    for c in candidates(self.question, s)
                    if not c[0].isdigit()
                ),
                None,
            )
            if self.bridge:
                return self.search(self.bridge)
        if self.bridge:
            own = [p for p in self.passages if p.title.lower() == self.bridge.lower()]
            return self.answer(read(self.question, own or self.passages, exclude=(self.bridge,)))
        return self.answer(read(self.question, self.passages))


def both_entities(question: str) -> tuple[str, str] | None:
    """``Are A and B from the same country?`` -> ``(A, B)``."""
    m = re.match(
        r'^\s*(?:are|were|is|was|do|does|did)\s+"?(.+?)"?\s+and\s+"?(.+?)"?\s+(?:both|from|made|of|in|the|'
        r"born|located|founded|released|written|directed)\b",
        question,
        re.I,
    )
    return (m[1], m[2]) if m else None


def supporting_titles(meta: Any) -> list[str]:
    """Gold titles from a task's meta: ``supporting_titles``, HF-style or official ``supporting_facts``, ``titles``."""
    for key in ("supporting_titles", "gold_titles", "titles"):
        if isinstance(meta.get(key), list | tuple):
            return [str(t) for t in meta[key]]
    facts = meta.get("supporting_facts")
    if isinstance(facts, dict) and "title" in facts:
        return list(dict.fromkeys(str(t) for t in facts["title"]))
    if isinstance(facts, list | tuple):
        return list(dict.fromkeys(str(f[0]) for f in facts if isinstance(f, list | tuple) and f))
    return []


class HotpotQAOraclePolicy(_SearchPolicy):
    """Searches each gold supporting title, one per turn, then answers the gold answer. An oracle: an upper bound.

    Writes Search-R1 tags when the env reads tags (its parser is ``"tag"``), Hermes tool calls otherwise."""

    name = "oracle"
    is_oracle = True

    def reset(self, env: gym.Env, observation: str, info: dict[str, Any]) -> None:
        super().reset(env, observation, info)
        parser = getattr(env.unwrapped, "parser", None)
        if parser is not None:  # the env's own parser is exact where the observation's wording is a guess
            self.tags = getattr(parser, "name", "") == "tag"
        task = env.unwrapped.task
        if task is None or task.answer is None:
            raise PolicyError("the HotpotQA oracle needs env.unwrapped.task with a gold answer")
        self.gold = task.answer[0] if isinstance(task.answer, list | tuple) else str(task.answer)
        self.queue = supporting_titles(task.meta)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.search(self.queue.pop(0)) if self.queue else self.answer(self.gold)
