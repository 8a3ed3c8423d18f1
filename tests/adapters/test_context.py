from __future__ import annotations

import pytest

from agentgym_r1.adapters.context import ContextPolicy, last_k_turns, make_context
from agentgym_r1.error import ConfigError

HISTORY = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "task"},
    {"role": "assistant", "content": "a1"},
    {"role": "tool", "content": "r1"},
    {"role": "assistant", "content": "a2"},
    {"role": "user", "content": "bad"},
    {"role": "assistant", "content": "a3"},
    {"role": "tool", "content": "r3"},
    {"role": "tool", "content": "r3b"},
]


def test_last_k_keeps_the_task_and_the_last_turns():
    assert last_k_turns(HISTORY, 1) == HISTORY[:2] + HISTORY[6:]
    assert last_k_turns(HISTORY, 2) == HISTORY[:2] + HISTORY[4:]
    assert last_k_turns(HISTORY, 0) == HISTORY[:2]
    assert last_k_turns(HISTORY, 9) == HISTORY
    assert last_k_turns(HISTORY[:2], 1) == HISTORY[:2]


def test_make_context_reads_every_spelling():
    assert make_context("full").full
    assert make_context(3) == ContextPolicy("last_k", k=3)
    summary = make_context(lambda m: m[:2])
    assert summary.kind == "summary" and summary.messages(HISTORY) == HISTORY[:2]
    with pytest.raises(ConfigError, match="context must be"):
        make_context("everything")
    with pytest.raises(ConfigError, match="list of"):
        make_context(lambda m: "a summary").messages(HISTORY)
