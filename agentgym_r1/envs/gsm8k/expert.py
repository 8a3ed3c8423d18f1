"""The GSM8K expert episode as actions: one Hermes calculator call per expert expression, then the answer.

Every place that plays an expert GSM8K episode (the SFT warm start, the tiny-model kit, the leaderboard's oracle)
builds it here, so they all train on and show the same text.
"""

from __future__ import annotations

import json
from typing import Any


def expert_actions(task: Any) -> list[str]:
    """The actions of ``task``'s expert episode: a calculator call for each expression of ``task.meta["expert"]``
    (the synthetic source's trace, or the ``<<expr=value>>`` annotations of the official data), then the answer."""
    calls = [json.dumps({"name": "calculator", "arguments": {"expression": e}}) for e in task.meta.get("expert", [])]
    return [*(f"<tool_call>{c}</tool_call>" for c in calls), f"<answer>{task.answer}</answer>"]
