"""What a time limit on every env call costs: microseconds per call on each env backend, for a step that costs
almost nothing (an invalid action on ``AgentR1/GSM8K-v0``, ~7 us), so the figure is the backend's own overhead.

    PYTHONPATH=. python benchmarks/env_call_overhead.py [--envs 32] [--rounds 100] [--repeats 5] [--workers 1]

``inline`` is how the thread backend ran calls before every call had a limit (in the calling thread, one after
another); ``thread`` runs each call in a daemon thread waited for with a limit (``env_workers`` at a time);
``process`` and ``ray`` send each round as one batch per worker and take one reply per call. The repeats are
interleaved (inline, thread, process, ... then again), and the median of each is printed, so a load spike on a shared
machine touches every backend alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

from agentgym_r1.adapters.env_backends import EnvCall, EnvHost, make_env_backend

KWARGS = {"source": "synthetic"}


def per_call_us(run, envs: int, rounds: int) -> float:
    """Microseconds per step call over ``rounds`` rounds of ``envs`` steps (resets not counted)."""
    run([EnvCall(i, None, "AgentR1/GSM8K-v0", KWARGS, i) for i in range(envs)])
    steps = [EnvCall(i, "no tool call here") for i in range(envs)]
    start = time.perf_counter()
    for _ in range(rounds):
        replies = run(steps)
    elapsed = time.perf_counter() - start
    assert all(r.error is None for r in replies), replies[0].error
    return elapsed / (rounds * envs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--backends", nargs="+", default=["inline", "thread", "process"])
    args = parser.parse_args()
    backends = {
        name: (EnvHost() if name == "inline" else make_env_backend(name, args.workers)) for name in args.backends
    }
    figures: dict[str, list[float]] = {name: [] for name in backends}
    try:
        for _ in range(args.repeats):
            for name, backend in backends.items():
                figures[name].append(per_call_us(backend.run, args.envs, args.rounds))
                backend.release(range(args.envs)) if name != "inline" else None
    finally:
        for backend in backends.values():
            backend.close()
    print(
        f"{args.envs} envs x {args.rounds} rounds of GSM8K invalid-action steps, {args.workers} worker(s), "
        f"median of {args.repeats} interleaved repeats"
    )
    print(f"{'backend':8} {'us/call':>8} {'min':>8} {'max':>8}")
    for name, values in figures.items():
        print(f"{name:8} {statistics.median(values):8.1f} {min(values):8.1f} {max(values):8.1f}")


if __name__ == "__main__":
    main()
