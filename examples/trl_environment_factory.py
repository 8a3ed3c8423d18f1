"""GRPO with TRL's own tool loop on a served GSM8K env: TRL's ``environment_factory`` over an OpenEnv server.

Start the server (any registered env can be served; this example's tools are GSM8K's)::

    agentgym-r1 serve env AgentR1/GSM8K-v0 source=synthetic --port 8000

then train::

    python examples/trl_environment_factory.py --url http://127.0.0.1:8000 --model Qwen/Qwen3-0.6B --max-steps 50

Without ``--model`` the script builds a tiny Qwen2-style model and tokenizer on the spot (nothing downloaded) and
runs a few steps: what CI runs. A random model never writes a tool call, so the tiny one is first taught a single
calculator call (``--teach-steps`` of supervised steps on the rendered prompts): TRL's loop then parses it, calls
the served env and feeds the result back. Its rewards say nothing about learning; the point is the plumbing.

TRL 1.16's contract (``GRPOTrainer.__init__``, ``trl/trainer/grpo_trainer.py``): ``environment_factory`` is a
callable returning one environment per rollout (TRL pools and reuses them across batches). Its public methods other
than ``reset``/``get_reward`` become the model's tools (name, typed arguments and a Google-style docstring make the
schema); ``reset(**row)`` is called with the dataset row before generation and its string is appended to the last
user message; ``get_reward()`` scores the finished rollout from the env's state and is logged under the class name.
TRL parses the model's tool calls with the tokenizer's response template (``add_response_schema`` knows the Qwen3
chat template, which the tiny tokenizer therefore uses), runs them, and feeds the results back as ``tool`` messages.

Here each environment is one session on the server: ``gym.make("AgentR1/Remote-v0", url=...)``, the same env the
rollout engine and the leaderboard play; a tool call becomes the env's own action text (a Hermes
``<tool_call>`` for the calculator, ``<answer>`` for the answer), so the env's reward parts apply unchanged.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

import gymnasium as gym

import agentgym_r1  # noqa: F401  (registers AgentR1/Remote-v0)


class ServedGSM8K:
    """One rollout's environment: a session on the GSM8K server. Public methods are the model's tools."""

    url = "http://127.0.0.1:8000"

    def __init__(self) -> None:
        self.env = gym.make("AgentR1/Remote-v0", url=self.url)
        self.reward, self.done = 0.0, True

    def reset(self, seed: int, **row: Any) -> str:
        """Start the episode of the row's seed; the question goes after the row's prompt."""
        self.env.reset(seed=int(seed))
        self.reward, self.done = 0.0, False
        return "\n\n" + self.env.unwrapped.task.prompt

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: The expression to evaluate, e.g. "3 * (4 + 5)".
        """
        call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
        return self._play(f"<tool_call>\n{call}\n</tool_call>")

    def answer(self, answer: str) -> str:
        """Give the final answer; the episode ends.

        Args:
            answer: The final numeric answer.
        """
        return self._play(f"<answer>{answer}</answer>")

    def get_reward(self) -> float:
        return self.reward

    def _play(self, action: str) -> str:
        if self.done:
            return "The episode is over."
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self.reward += reward
        self.done = terminated or truncated
        return obs


def tiny_model_and_tokenizer() -> tuple[Any, Any]:
    """A random tiny Qwen2-style model with a BPE tokenizer trained on GSM8K episodes, using TRL's Qwen3 template."""
    from trl.chat_template_utils import qwen3_chat_template

    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus

    tokenizer = train_tokenizer(gsm8k_corpus(20), vocab_size=400, split_digits=True, cross_spaces=True)
    tokenizer.chat_template = qwen3_chat_template
    return make_model(tokenizer, hidden=32, layers=1, heads=2), tokenizer


TAUGHT_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n</tool_call>'


def teach_one_tool_call(model: Any, tokenizer: Any, prompts: list[str], steps: int) -> None:
    """A few supervised steps so the tiny model answers every prompt with :data:`TAUGHT_CALL` (loss on the reply)."""
    import torch

    reply = tokenizer(TAUGHT_CALL + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    rows = [tokenizer(p, add_special_tokens=False)["input_ids"] + reply for p in prompts]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for step in range(steps):
        ids = torch.tensor([rows[step % len(rows)]])
        labels = ids.clone()
        labels[:, : ids.shape[1] - len(reply)] = -100
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def main(argv: list[str] | None = None) -> Any:
    p = argparse.ArgumentParser(description="GRPO with TRL's environment_factory on a served GSM8K env")
    p.add_argument("--url", default=ServedGSM8K.url, help="the env server (agentgym-r1 serve env ...)")
    p.add_argument("--model", default=None, help="a chat model with tool calling (default: a tiny random one)")
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--max-completion-length", type=int, default=48)
    p.add_argument("--teach-steps", type=int, default=60, help="tiny model only: steps teaching it one tool call")
    p.add_argument("--output-dir", default=None)
    args = p.parse_args(argv)

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    ServedGSM8K.url = args.url
    if args.model is None:
        model, tokenizer = tiny_model_and_tokenizer()
    else:
        from transformers import AutoTokenizer

        model, tokenizer = args.model, AutoTokenizer.from_pretrained(args.model)
    instruction = "Solve the problem. Use the calculator tool for arithmetic, then call the answer tool."
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": instruction}]] * args.tasks, "seed": list(range(args.tasks))}
    )
    config = GRPOConfig(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="grpo-openenv-"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=3,
        learning_rate=1e-4,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    if args.model is None and args.teach_steps:
        probe, tools = ServedGSM8K(), []
        prompts = []
        for seed in range(args.tasks):
            question = probe.reset(seed)
            tools = [probe.calculator, probe.answer]
            prompts.append(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": instruction + question}],
                    tools=tools,
                    add_generation_prompt=True,
                    tokenize=False,
                )
            )
        probe.env.close()
        teach_one_tool_call(model, tokenizer, prompts, args.teach_steps)
    trainer = GRPOTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer, environment_factory=ServedGSM8K
    )
    trainer.train()
    for log in trainer.state.log_history:
        if "reward" in log:
            print(
                f"step {log['step']}: reward {log['reward']:.3f}, tool calls per rollout "
                f"{log.get('tools/call_frequency', 0.0):.2f}"
            )
    return trainer


if __name__ == "__main__":
    main()
