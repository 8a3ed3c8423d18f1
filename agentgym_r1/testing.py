"""Test kits: fixed inputs for the tests, benchmarks and examples, never imported by the package itself.

The builders of a tiny model and tokenizer are part of the package (:mod:`agentgym_r1.adapters.scratch`: the
leaderboard's main job trains its agent from them); what is only a kit lives here.
"""

from __future__ import annotations

from agentgym_r1.adapters.scratch import expert_corpus
from agentgym_r1.envs.gsm8k.expert import expert_actions


def gsm8k_corpus(episodes: int = 40, seed: int = 0) -> list[str]:
    """Text of expert episodes of synthetic GSM8K (:func:`~agentgym_r1.envs.gsm8k.expert.expert_actions`): the
    corpus the tests' and benchmarks' tiny tokenizers are trained on."""
    return expert_corpus("AgentR1/GSM8K-v0", {"source": "synthetic"}, expert_actions, episodes, seed)


# A two-tool calculator in OpenAI's tool schema, and the functions that answer its calls: the proxy's tests and
# ``examples/proxy_agent.py`` run the same ``openai`` tool loop over it.
CALCULATOR_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} two numbers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
    for name in ("add", "multiply")
]
CALCULATOR = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b}
