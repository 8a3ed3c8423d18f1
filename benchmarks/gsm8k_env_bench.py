"""GSM8K env step speed: calculator steps, answer steps, invalid steps and resets, against peer envs.

Prints steps per second and the median microseconds per step, through ``gym.make`` (with Gymnasium's wrappers)
and on the unwrapped env, then the same work on skyrl-gym's ``gsm8k`` env and GEM's math env, with the ratios.

    python benchmarks/gsm8k_env_bench.py [--n 20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import gymnasium as gym

import agentgym_r1  # noqa: F401

CALC = '<tool_call>{"name": "calculator", "arguments": {"expression": "(12 + 30) * 4 / 7"}}</tool_call>'
INVALID = "I believe the answer is probably forty-two"


def timed(n: int, setup: Callable[[], None], work: Callable[[], object]) -> list[float]:
    """Run ``setup`` then time ``work`` alone, ``n`` times; microseconds."""
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        setup()
        t0 = clock()
        work()
        out.append((clock() - t0) / 1000)
    return out


def report(name: str, samples: list[float]) -> float:
    med = statistics.median(samples)
    p95 = statistics.quantiles(samples, n=20)[-1]
    print(
        f"{name:<44} median {med:8.2f} us   p95 {p95:8.2f} us   "
        f"{1e6 / statistics.fmean(samples):12,.0f} steps/s (1/mean)"
    )
    return med


def bench_ours(n: int, wrapped: bool) -> dict[str, float]:
    env = gym.make("AgentR1/GSM8K-v0", source="synthetic")
    target = env if wrapped else env.unwrapped
    label = "gym.make" if wrapped else "unwrapped"
    state = {"answer": "0", "i": 0}

    def distinct_call() -> object:  # a new expression each time: the parse cache never hits
        state["i"] += 1
        expression = f"({state['i']} + 30) * 4 / 7"
        return target.step(
            f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'
        )

    def reset() -> None:
        target.reset(seed=0)
        state["answer"] = f"<answer>{env.unwrapped.task.answer}</answer>"

    out = {
        "reset": report(f"agentgym-r1 GSM8K ({label}) reset", timed(n, lambda: None, lambda: target.reset())),
        "calculator": report(
            f"agentgym-r1 GSM8K ({label}) calculator step", timed(n, reset, lambda: target.step(CALC))
        ),
        "calculator_distinct": report(
            f"agentgym-r1 GSM8K ({label}) calculator, new expr", timed(n, reset, distinct_call)
        ),
        "answer": report(
            f"agentgym-r1 GSM8K ({label}) answer step", timed(n, reset, lambda: target.step(state["answer"]))
        ),
        "invalid": report(f"agentgym-r1 GSM8K ({label}) invalid step", timed(n, reset, lambda: target.step(INVALID))),
    }
    env.close()
    return out


def bench_skyrl(n: int) -> float | None:
    try:
        from skyrl_gym.envs.gsm8k.env import GSM8kEnv
    except ImportError:
        print("skyrl-gym not installed: pip install skyrl-gym")
        return None
    env = GSM8kEnv(extras={"reward_spec": {"method": "rule", "ground_truth": "42"}})
    env.init([{"role": "user", "content": "q"}])
    return report("skyrl-gym gsm8k answer step", timed(n, lambda: None, lambda: env.step("so #### 42")))


def bench_gem(n: int) -> float | None:
    try:
        from datasets import Dataset
        from gem.envs.math_env import MathEnv
    except ImportError:
        print("gem-llm or datasets not installed: pip install gem-llm datasets")
        return None
    ds = Dataset.from_dict({"problem": ["What is 6 * 7?"] * 8, "answer": ["42"] * 8})
    env = MathEnv(dataset=ds, use_mp=False)  # in-process grading; use_mp=True adds a process round trip
    return report(
        "GEM math answer step (correct \\boxed{})",
        timed(n, lambda: env.reset(), lambda: env.step("The answer is \\boxed{42}")),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20000, help="steps per measurement")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    wrapped = bench_ours(args.n, wrapped=True)
    raw = bench_ours(args.n, wrapped=False)
    skyrl = bench_skyrl(args.n)
    gem = bench_gem(max(200, args.n // 20))
    print()
    print(
        f"targets: calculator step <= 50 us median (gym.make: {wrapped['calculator']:.1f} us repeated expression, "
        f"{wrapped['calculator_distinct']:.1f} us new expressions), "
        f"answer step <= 10 us (gym.make: {wrapped['answer']:.1f} us)"
    )
    if skyrl:
        print(
            f"answer step vs skyrl-gym gsm8k: {wrapped['answer'] / skyrl:.1f}x (gym.make), "
            f"{raw['answer'] / skyrl:.1f}x (unwrapped)  [skyrl-gym: a bare regex, no transcript or info]"
        )
    if gem:
        print(f"answer step vs GEM math env: {gem / wrapped['answer']:.0f}x faster (gym.make)")
    if args.json:
        print(json.dumps({"gym_make": wrapped, "unwrapped": raw, "skyrl_gym": skyrl, "gem": gem}))


if __name__ == "__main__":
    main()
