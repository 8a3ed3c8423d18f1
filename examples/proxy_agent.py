"""Train any agent through the proxy: an ``openai`` tool-calling agent, unchanged, becomes GRPO training rows.

    python examples/proxy_agent.py                   # a tiny model built on the spot (CPU, about a minute)
    python examples/proxy_agent.py --model DIR       # a local chat model (Qwen2.5-0.5B-Instruct, ...)

1. The agent: the ``openai`` client's tool loop with two tools. It knows nothing of training; its API key names its
   session on the proxy.
2. The proxy (``agentgym_r1.adapters.proxy_server.Proxy``) serves the policy under the chat-completions API and
   records every call's token ids, log-probabilities and masks; a reward function closes each session.
3. The rows: one concatenated row per session, exactly the rollout engine's (``RolloutBatch``).
4. GRPO: ``AgentGRPOTrainer(..., rollouts=AgentRollouts(args, tokenizer, agent, reward))`` takes one step on rows
   the agent made through the trainer's own proxy.
"""

from __future__ import annotations

import argparse
import json
import tempfile

from agentgym_r1.testing import CALCULATOR, CALCULATOR_TOOLS


def agent(base_url: str, session: str, task: dict | None = None) -> list[dict]:
    """A plain ``openai`` tool-calling loop (at most four calls); returns the conversation."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=session, max_retries=0)
    messages = [
        {"role": "system", "content": "You are a calculator. Use the tools."},
        {"role": "user", "content": "What is (2+3)*4?"},
    ]
    for _ in range(4):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=CALCULATOR_TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            try:
                result = str(CALCULATOR[call.function.name](**json.loads(call.function.arguments)))
            except Exception as e:  # the model's bad call is the agent's to answer
                result = f"error: {e}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return messages


def reward(messages: list[dict], task: dict | None = None) -> float:
    return float("20" in str(messages[-1].get("content") or ""))


def tiny(folder: str) -> str:
    """A tiny tokenizer and model saved in ``folder`` (nothing is downloaded)."""
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus

    tokenizer = train_tokenizer(gsm8k_corpus(20), folder, vocab_size=400)
    make_model(tokenizer, folder, hidden=64, layers=2)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a local model directory (default: a tiny model built here)")
    parser.add_argument("--no-train", action="store_true", help="record rows only, skip the GRPO step")
    opts = parser.parse_args()
    folder = opts.model or tiny(tempfile.mkdtemp(prefix="proxy-example-"))

    from agentgym_r1.adapters.proxy_server import Proxy, load_backend

    backend, chat = load_backend(folder)
    with Proxy(backend, chat, "policy", reward_fn=reward, max_context=1024) as proxy:
        conversation = agent(proxy.base_url, "session-1")
        proxy.close("session-1")
        batch = proxy.batch(["session-1"])
    row = batch.samples[0]
    print(f"{len(conversation)} messages; one {batch.layout} row: {len(row.prompt_ids)} prompt tokens, ")
    print(
        f"{len(row.completion_ids)} completion tokens of which {sum(row.env_mask)} are the model's; reward {row.reward}"
    )
    if opts.no_train:
        return

    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.trainers.agent_rollouts import AgentRollouts
    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    args = AgentGRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="proxy-grpo-"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=1,
        max_completion_length=256,
        max_new_tokens=32,
        num_tasks=4,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    tokenizer = load_tokenizer(folder)
    rollouts = AgentRollouts(args, tokenizer, agent, reward)
    try:
        trainer = AgentGRPOTrainer(load_model(folder), args, tokenizer, rollouts=rollouts)
        trainer.train()
    finally:
        rollouts.close()
    print({k: v for k, v in trainer.state.log_history[-1].items() if k.startswith(("loss", "rollout"))})


if __name__ == "__main__":
    main()
