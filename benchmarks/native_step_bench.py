"""One env step with a family's ``parser="auto"`` parser on its slowest shapes: min wall and CPU time of a few repeats.

The shapes are Gemma 4's worst in the fuzz campaign (``benchmarks/fuzz_envs.py``): an unclosed call followed by
90,000 characters (the env read the action twice per step, and each failed reading was retried with both end-of-turn
tokens: six parses) and 14,000 ``<turn|>`` (one content region closed per marker). Envs: ALFWorld and WebShop, the two
that read a call or a plain command.

    PYTHONPATH=. python benchmarks/native_step_bench.py                  # Gemma 4
    PYTHONPATH=. python benchmarks/native_step_bench.py --template qwen3 --repeats 10

Target: <= 50 ms a step.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gymnasium as gym

import agentgym_r1  # noqa: F401  (registers the envs)
from agentgym_r1.adapters import ChatTokenizer
from agentgym_r1.adapters.families import trl_text_templates
from agentgym_r1.adapters.native import native_parser
from agentgym_r1.adapters.scratch import family_tokenizer, train_tokenizer
from agentgym_r1.testing import gsm8k_corpus

SHAPES = {
    "unclosed call + 90k": '<|tool_call>call:act{command:<|"|>look' + "a" * 90_000,
    "<turn|> x 14k": "<turn|>" * 14_000,
}
ENVS = {"AgentR1/ALFWorld-v1": {"source": "generated", "num_games": 3}, "AgentR1/WebShop-v0": {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", default="gemma4", help="a TRL chat template name")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = train_tokenizer(gsm8k_corpus(30), tmp, vocab_size=400)
    parser = native_parser(ChatTokenizer(family_tokenizer(base, trl_text_templates()[args.template])))
    for env_id, kwargs in ENVS.items():
        env = gym.make(env_id, parser=parser, **kwargs)
        env.reset(seed=0)
        for label, action in SHAPES.items():
            walls, cpus = [], []
            for _ in range(args.repeats):
                t0, c0 = time.perf_counter(), time.thread_time()
                _, _, terminated, truncated, _ = env.step(action)
                walls.append(time.perf_counter() - t0)
                cpus.append(time.thread_time() - c0)
                if terminated or truncated:
                    env.reset(seed=0)
            print(f"{env_id:<20} {label:<20} min wall {min(walls) * 1e3:6.1f} ms   min CPU {min(cpus) * 1e3:6.1f} ms")
        env.close()


if __name__ == "__main__":
    main()
