"""What the proxy tests share: a two-tool calculator task, a tiny model taught its three turns, an env that plays the
same task for the rollout engine, and the ``openai`` client's tool-calling loop."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

from agentgym_r1.core.native import read_hermes
from agentgym_r1.testing import CALCULATOR, CALCULATOR_TOOLS

SYSTEM = "You are a calculator. Use the tools."
QUESTION = "What is (2+3)*4?"
TOOLS, RUN = CALCULATOR_TOOLS, CALCULATOR
# The model's three turns: call add, call multiply with add's result, answer.
TURNS = [
    '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
    '<tool_call>\n{"name": "multiply", "arguments": {"a": 5, "b": 4}}\n</tool_call>',
    "The answer is 20.",
]
RESULTS = ["5", "20"]


def first_messages() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def taught_ids(chat) -> tuple[list[int], list[int]]:
    """The episode's token ids as the engine builds them (prompt, each turn's ids with its end-of-turn token and the
    tool result as a suffix), and a mask of the model's tokens."""
    eos = chat.tokenizer.eos_token_id
    history = first_messages()
    ids = chat.prompt_ids(history)
    mask = [0] * len(ids)
    for i, text in enumerate(TURNS):
        turn = [*chat.encode(text), eos]
        ids, mask = ids + turn, mask + [1] * len(turn)
        history = [*history, {"role": "assistant", "content": text}]
        if i < len(RESULTS):
            suffix = chat.suffix_ids(history, [{"role": "tool", "content": RESULTS[i]}], turn)
            ids, mask = ids + suffix, mask + [0] * len(suffix)
            history.append({"role": "tool", "content": RESULTS[i]})
    return ids, mask


def taught_model(tokenizer, chat, steps: int = 400) -> Any:
    """A tiny model trained until greedy decoding writes :data:`TURNS` (its argmax right on every model token, with a
    loss under 0.05 so that the batched and cached paths of generation agree on it)."""
    import torch

    from agentgym_r1.adapters.scratch import make_model

    torch.manual_seed(0)
    model = make_model(tokenizer, hidden=32, layers=1, heads=2).train()
    ids, mask = taught_ids(chat)
    x = torch.tensor([ids])
    target = torch.tensor(ids[1:])
    weight = torch.tensor(mask[1:], dtype=torch.bool)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(steps):  # bounded; stops once every model token is the argmax by a clear margin
        logits = model(x).logits[0, :-1]
        loss = torch.nn.functional.cross_entropy(logits[weight], target[weight])
        if torch.equal(logits.argmax(-1)[weight], target[weight]) and loss.item() < 0.05:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        raise AssertionError(f"the tiny model did not learn the episode in {steps} steps")
    return model.eval()


class CalcEnv(gym.Env):
    """The task as an env for the rollout engine: the same messages the agent loop sends."""

    observation_space = gym.spaces.Text(10_000)
    action_space = gym.spaces.Text(10_000)

    def __init__(self) -> None:
        self.transcript = self
        self.log: list[dict[str, Any]] = []

    def messages(self) -> list[dict[str, Any]]:
        return self.log

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.log = first_messages()
        return QUESTION, {}

    def step(self, action):
        self.log.append({"role": "assistant", "content": action})
        calls, _ = read_hermes(action)
        if not calls:
            return "", float("20" in action), True, False, {}
        result = str(RUN[calls[0].name](**calls[0].arguments))
        self.log.append({"role": "tool", "content": result})
        return result, 0.0, False, False, {}


def reward(messages: list[dict[str, Any]]) -> float:
    """1 when the final answer says 20."""
    return float("20" in str(messages[-1].get("content") or ""))


def openai_agent(base_url: str, session: str, max_turns: int = 6, **create: Any) -> list[dict[str, Any]]:
    """The ``openai`` client's tool-calling loop with the two tools; returns the conversation."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=session, max_retries=0, timeout=60)
    messages: list[Any] = first_messages()
    for _ in range(max_turns):  # bounded
        reply = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, temperature=0, **create)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(RUN[call.function.name](**args))})
    return messages
