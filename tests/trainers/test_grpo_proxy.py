"""One GRPO step on rows an agent made through the proxy (#40): the ``openai`` client plays two calls per session
against the policy, served on loopback by the trainer's proxy; the step trains on the model's tokens only."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("fastapi")
pytest.importorskip("openai")

from tests.trainers.kit import grpo_args, run_one_step, tiny_model, tiny_tokenizer  # noqa: E402


def two_calls(base_url: str, session: str, task: dict) -> None:
    """An agent: asks, then asks again after its first reply (an env message between the model's two turns)."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=session, max_retries=0, timeout=120)
    messages = [{"role": "system", "content": "Write digits."}, {"role": "user", "content": "Go."}]
    for _ in range(2):
        reply = client.chat.completions.create(model="policy", messages=messages)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Again."}]


def by_length(messages: list[dict], task: dict) -> float:
    return len(messages[-1].get("content") or "") / 10


def test_one_grpo_step_trains_on_proxy_rows(tmp_path) -> None:
    from agentgym_r1.trainers.agent_rollouts import AgentRollouts

    tokenizer = tiny_tokenizer()
    args = grpo_args(tmp_path, num_tasks=4, per_device_train_batch_size=4, num_generations=4)
    rollouts = AgentRollouts(args, tokenizer, two_calls, by_length)
    try:
        captured, changed = run_one_step(tiny_model(tokenizer), args, tokenizer, make_env=None, rollouts=rollouts)
    finally:
        rollouts.close()
    assert changed
    batch = captured["batch"]
    assert len(batch.samples) == 4 and not any(r.failed for r in batch.samples)
    assert all(len(r.step_ends) == 2 for r in batch.samples)  # two calls, one concatenated row each
    assert len({r.reward for r in batch.samples}) > 1, "the group's rewards differ, so there is an advantage"
    out = captured["inputs"][-1]
    grad = captured["logps"][-1].grad.abs()
    completion = out["completion_mask"] == 1
    env = (out["tool_mask"] == 0) & completion
    assert env.any() and torch.all(grad[env] == 0)  # the proxy's env tokens carry no gradient
    assert grad[completion].sum() > 0
