"""ALFWorld envs stepped from several threads at once play exactly as they do one after another.

TextWorld parses its grammar templates with one module-global parser; without the process-wide lock in
:mod:`agentgym_r1.envs.alfworld.env`, envs in threads (the rollout engine's and the leaderboard's thread workers)
raised ``IndexError`` from tatsu or got each other's text.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("textworld")
pytest.importorskip("fast_downward")
pytest.importorskip("alfworld")

KWARGS = {"source": "generated", "num_games": 3}
STEPS = 12


def walk(seed: int) -> list[str]:
    """A seeded random walk over admissible commands and a few invalid ones; every observation, in order."""
    env = gym.make("AgentR1/ALFWorld-v1", **KWARGS)
    rng = np.random.default_rng(seed)
    try:
        obs, info = env.reset(seed=seed)
        seen = [obs]
        for _ in range(STEPS):
            admissible = env.unwrapped.env_info()["admissible_commands"]
            command = str(rng.choice([*admissible, "take moon 1 from sky 1"]))
            obs, _, terminated, truncated, info = env.step(command)
            seen.append(f"{obs} | {info['env']['admissible_commands']} | {info['reward']}")
            if terminated or truncated:
                seen.append(env.reset(seed=seed + 100)[0])
        seen.append(" ".join(env.unwrapped.expert_plan()))
        return seen
    finally:
        env.close()


def test_envs_in_threads_play_as_they_do_alone():
    seeds = list(range(4))
    alone = [walk(s) for s in seeds]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows: races show at once
    try:
        with ThreadPoolExecutor(len(seeds)) as pool:
            together = list(pool.map(walk, seeds))
    finally:
        sys.setswitchinterval(interval)
    for seed, a, b in zip(seeds, alone, together, strict=True):
        assert a == b, f"seed {seed}: the walks differ in threads"
