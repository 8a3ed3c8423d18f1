"""The sandboxed ``python`` tool: one call's latency, and PythonMath episodes per second.

Times a small program (the kind a math agent writes) through the tool under bubblewrap and, for comparison, under
the plain-subprocess fallback (rlimits only, not isolation); then plays whole ``AgentR1/PythonMath-v0`` episodes with
the scripted baseline (one python call and an answer each) on one thread. Prints p50/p95 milliseconds per call and
episodes per second.

    python benchmarks/python_tool_bench.py [--calls 200] [--episodes 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import gymnasium as gym

import agentgym_r1  # noqa: F401
from agentgym_r1.core.sandbox import Limits, PythonTool, bwrap_problem
from agentgym_r1.leaderboard.baselines.pythonmath import PythonAgentPolicy

# Generous bounds: on a loaded machine a call can wait seconds for a CPU; the bench measures, it does not time out.
LIMITS = Limits(cpu_s=60, wall_s=300.0)
PROGRAM = "v = 120\nv = v + 3 * 12\nv = v - v / 4\nprint(int(v) if v == int(v) else v)"


def latency(tool: PythonTool, calls: int) -> tuple[float, float]:
    """p50 and p95 milliseconds of ``calls`` calls of :data:`PROGRAM` (after one warm-up call)."""
    tool(code=PROGRAM)
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        result = tool(code=PROGRAM)
        samples.append((time.perf_counter() - t0) * 1000)
        assert result.ok and result.text.strip() == "117", result.text
    return statistics.median(samples), statistics.quantiles(samples, n=20)[-1]


def episodes_per_second(episodes: int) -> tuple[float, float]:
    """Episodes per second and the success rate of the scripted baseline on the easy synthetic source."""
    env = gym.make("AgentR1/PythonMath-v0", limits=LIMITS)
    policy, solved = PythonAgentPolicy(), 0
    t0 = time.perf_counter()
    for seed in range(episodes):
        obs, info = env.reset(seed=seed)
        policy.reset(env, obs, info)
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        solved += info["metrics"]["accuracy"] == 1.0
    elapsed = time.perf_counter() - t0
    env.close()
    return episodes / elapsed, solved / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    problem = bwrap_problem()
    if problem is not None:
        raise SystemExit(f"bwrap cannot sandbox here: {problem}")
    p50, p95 = latency(PythonTool(limits=LIMITS), args.calls)
    print(f"python tool, bwrap:             p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   ({args.calls} calls)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        plain = PythonTool(sandbox="rlimits", limits=LIMITS)
    p50, p95 = latency(plain, args.calls)
    print(f"python tool, rlimits (no isolation): p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   ({args.calls} calls)")
    rate, success = episodes_per_second(args.episodes)
    print(
        f"PythonMath-v0 scripted episodes: {rate:.2f} episodes/s on one thread, success {success:.0%} "
        f"({args.episodes} episodes)"
    )
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
