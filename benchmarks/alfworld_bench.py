"""ALFWorld figures: the stock and fast engines side by side, the env against the raw TextWorld env, RSS over many
resets, generator throughput.

    PYTHONPATH=. python benchmarks/alfworld_bench.py [--data ../shared/data/alfworld] [--walk-steps 40]
        [--extra-envs 8] [--big 3553] [--episodes 10] [--resets 1000] [--generate 12] [--only 0]

0. Stock (``engine="textworld"``: TextWorld's ``PddlEnv``) and fast (``engine="fast"``, the default) engines on the
   same games and the same commands, calls interleaved: step and reset time (p50, p95) over one seeded random walk of
   ``--walk-steps`` per game (a quarter of the commands invalid), compile time per game, RSS per extra env over the
   same game set (``--extra-envs`` envs of each engine, each reset on every game and stepped), and the time to the
   first reset of an env over a split of ``--big`` games (the shared games linked again and again in
   alfworld-download's layout), in a fresh process.
1. Reset and step time (p50, p95) of ``AgentR1/ALFWorld-v0`` against the raw TextWorld env that ALFWorld builds
   (``PddlEnv`` with alfworld's ``AlfredDemangler`` and ``AlfredInfos``, requesting won and admissible commands),
   on the same game and the same commands (the expert's), episodes of the two interleaved.
2. RSS after 1,000 resets (one ``look`` after each) cycling over the games, and after opening and closing 50 envs.
3. Generator throughput: new games per second (generated, solved by the planner, replayed, written), fresh cache.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import gymnasium as gym
import numpy as np

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.envs.alfworld.engine import Engine
from agentgym_r1.envs.alfworld.fast import FastEngine
from agentgym_r1.envs.alfworld.generator import TASK_TYPES, generate
from agentgym_r1.envs.alfworld.parity import invalid_command


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def pct(xs: list[float]) -> str:
    return f"p50 {np.percentile(xs, 50) * 1e3:8.2f} ms   p95 {np.percentile(xs, 95) * 1e3:8.2f} ms   n={len(xs)}"


def engines_side_by_side(games: list[str], walk_steps: int) -> None:
    engines = {"stock": Engine(), "fast": FastEngine()}
    keys = ("step", "step CPU", "reset", "reset CPU", "first reset", "compile")
    times: dict[str, dict[str, list[float]]] = {name: {key: [] for key in keys} for name in engines}

    def clock(name: str, key: str, fn, *args):  # wall time, and this thread's CPU time (what preemption leaves out)
        t, c = time.perf_counter(), time.thread_time()
        out = fn(*args)
        times[name][key].append(time.perf_counter() - t)
        if f"{key} CPU" in times[name]:
            times[name][f"{key} CPU"].append(time.thread_time() - c)
        return out

    for n, path in enumerate(games):
        compiled = {name: clock(name, "compile", e.compile, path) for name, e in engines.items()}  # fast reuses
        rng = np.random.default_rng(n)
        for key in ("first reset", "reset", "reset"):  # the first derives the game's intro; then what an episode pays
            states = {name: clock(name, key, e.reset, compiled[name]) for name, e in engines.items()}
        names = sorted(compiled["stock"].names)
        for _ in range(walk_steps):
            admissible = states["stock"]["admissible_commands"]
            command = (
                invalid_command(rng, admissible, names)
                if rng.random() < 0.25
                else admissible[rng.integers(len(admissible))]
            )
            states = {name: clock(name, "step", e.step, command) for name, e in engines.items()}
            assert states["stock"].feedback == states["fast"].feedback, command
            if states["stock"]["done"]:
                break
    print(
        f"{len(games)} games, one random walk of up to {walk_steps} steps each (a quarter invalid), calls interleaved"
    )
    print(f"  {'':22s} {'stock p50':>10s} {'p95':>10s} {'fast p50':>10s} {'p95':>10s} {'speedup p50':>12s}")
    for key in keys:
        row = [np.percentile(times[name][key], q) * 1e3 for name in engines for q in (50, 95)]
        print(
            f"  {key + ' (ms)':22s} {row[0]:10.2f} {row[1]:10.2f} {row[2]:10.3f} {row[3]:10.3f} "
            f"{row[0] / row[2]:11.0f}x   n={len(times['fast'][key])}"
        )
    print("  (compile: fast is the cached translation, shared with stock here, plus its own compilation)")
    for e in engines.values():
        e.close()


def memory_per_env(games: list[str], extra: int) -> None:
    """RSS (everything, fast-downward's library copies included) and Python heap (tracemalloc) per extra env."""
    for name in ("fast", "textworld"):
        first = gym.make("AgentR1/ALFWorld-v0", source="generated", num_games=1, engine=name)
        for path in games:  # compiles the game set once (shared by every env of the process)
            first.reset(options={"game_file": path})
        gc.collect()
        before = rss_mib()
        tracemalloc.start()
        envs = []
        for _ in range(extra):
            env = gym.make("AgentR1/ALFWorld-v0", source="generated", num_games=1, engine=name)
            for path in games:
                env.reset(options={"game_file": path})
                env.step("look")
            envs.append(env)
        gc.collect()
        heap = tracemalloc.get_traced_memory()[0] / 2**20 / extra
        tracemalloc.stop()
        per = (rss_mib() - before) / extra
        print(
            f"  engine={name!r:12s} per extra env over {len(games)} games: RSS {per:6.2f} MiB, Python heap "
            f"{heap:6.2f} MiB ({extra} extra envs, each reset on every game)"
        )
        for env in [first, *envs]:
            env.close()


FIRST_RESET = """
import sys, time
t0 = time.perf_counter()
import gymnasium as gym, agentgym_r1
from agentgym_r1.envs.alfworld.engine import import_textworld
import_textworld()
t1 = time.perf_counter()
env = gym.make("AgentR1/ALFWorld-v0", source=sys.argv[1], split="train")
t2 = time.perf_counter()
env.reset(seed=0)
t3 = time.perf_counter()
env.reset(seed=1)
t4 = time.perf_counter()
print(f"  {len(env.unwrapped.games)} games: imports {t1 - t0:.2f} s, env (lists the split) {t2 - t1:.2f} s, "
      f"first reset (compiles one game) {t3 - t2:.2f} s, a reset on another game {t4 - t3:.2f} s; "
      f"time to first reset {t3 - t1:.2f} s")
"""


def first_reset(games: list[str], big: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        split = Path(root) / "json_2.1.1" / "train"
        for i in range(big):
            game = Path(games[i % len(games)])
            trial = split / f"{game.parent.parent.name}-{i}" / game.parent.name
            trial.mkdir(parents=True)
            os.symlink(game, trial / "game.tw-pddl")
        subprocess.run(
            [sys.executable, "-c", FIRST_RESET, root],
            check=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )


def raw_env():
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    return AlfredInfos(AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True))))


class TimedEngine:
    """Times the engine calls inside the env's ``reset``/``step``, to give the wrapper's own time exactly."""

    def __init__(self, engine) -> None:
        self.engine, self.last = engine, 0.0
        for name in ("reset", "step"):
            setattr(self, name, self._timed(getattr(engine, name)))

    def _timed(self, fn):
        def call(*args):
            t = time.perf_counter()
            out = fn(*args)
            self.last = time.perf_counter() - t
            return out

        return call

    def __getattr__(self, name):
        return getattr(self.engine, name)


def timing(env: gym.Env, game: str, episodes: int) -> None:
    env.reset(options={"game_file": game})
    commands = env.unwrapped.expert_plan()
    raw = raw_env()
    raw.load(game)
    timed = TimedEngine(env.unwrapped.engine)
    env.unwrapped._engine = timed
    times: dict[str, list[float]] = {k: [] for k in ("raw reset", "env reset", "raw step", "env step", "wrapper own")}

    def clock(key: str, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        times[key].append(time.perf_counter() - t)
        return out

    for _ in range(episodes):  # raw and env alternate call by call, so load on the machine hits both alike
        clock("raw reset", raw.reset)
        clock("env reset", lambda: env.reset(options={"game_file": game}))
        for c in commands:
            _, _, done = clock("raw step", raw.step, c)
            _, reward, terminated, _, _ = clock("env step", env.step, c)
            times["wrapper own"].append(times["env step"][-1] - timed.last)
        assert done and terminated and reward == 1.0, "the expert's commands did not win"
    env.unwrapped._engine = timed.engine
    raw.close()
    print(f"game: {game}\ncommands per episode: {len(commands)}")
    for name, xs in times.items():
        print(f"  {name:11s} {pct(xs)}")
    for kind in ("reset", "step"):
        env_p50, raw_p50 = np.percentile(times[f"env {kind}"], 50), np.percentile(times[f"raw {kind}"], 50)
        print(f"  {kind} time at p50, env vs raw: {100 * (env_p50 - raw_p50) / raw_p50:+.1f}%")
    own, engine = np.percentile(times["wrapper own"], 50), np.percentile(times["raw step"], 50)
    print(f"  wrapper's own time per step at p50: {own * 1e3:.3f} ms = {100 * own / engine:.2f}% of a raw step")


def memory(env: gym.Env, games: list[str], resets: int) -> None:
    marks: dict[int, float] = {}
    for i in range(resets + 1):
        env.reset(options={"game_file": games[i % len(games)]})
        env.step("look")
        if i in (0, 100, resets // 2, resets):
            marks[i] = rss_mib()
            print(f"  RSS after {i:5d} resets: {marks[i]:8.1f} MiB")
    if 100 in marks:
        print(f"  growth from reset 100 (every game compiled) to {resets}: {marks[resets] - marks[100]:+.1f} MiB")
    before = rss_mib()
    for _ in range(50):
        e = gym.make("AgentR1/ALFWorld-v0", source="generated", num_games=1)
        e.reset(options={"game_file": games[0]})
        e.close()
    print(f"  RSS after opening and closing 50 envs: {before:.1f} -> {rss_mib():.1f} MiB")


def throughput(n: int) -> None:
    with tempfile.TemporaryDirectory() as cache:
        t = time.perf_counter()
        for i in range(n):
            generate(1234, i, TASK_TYPES, cache)
        new = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(n):
            generate(1234, i, TASK_TYPES, cache)
        cached = time.perf_counter() - t
    print(f"  {n} new games in {new:.1f} s: {n / new:.2f} games/s (each solved by fast-downward and replayed)")
    print(f"  the same {n} from the cache: {n / cached:.0f} games/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "alfworld")
    )
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--resets", type=int, default=1000)
    parser.add_argument("--generate", type=int, default=12)
    parser.add_argument("--walk-steps", type=int, default=40)
    parser.add_argument("--extra-envs", type=int, default=8)
    parser.add_argument("--big", type=int, default=3553)
    parser.add_argument("--only", type=int, default=None, help="run only this section")
    args = parser.parse_args()
    real = sorted(Path(args.data).glob("json_2.1.1/*/*/*/game.tw-pddl"))
    games = [str(p) for p in real] or [str(generate(0, i, TASK_TYPES)) for i in range(6)]
    if args.only in (None, 0):
        print("== 0. stock vs fast engine ==")
        engines_side_by_side(games, args.walk_steps)
        memory_per_env(games, args.extra_envs)
        first_reset(games, args.big)
    if args.only == 0:
        return
    env = gym.make("AgentR1/ALFWorld-v0", source="generated", num_games=1)
    print("== 1. reset and step time, env vs raw TextWorld ==")
    timing(env, games[0], args.episodes)
    print(f"== 2. memory over {args.resets} resets ({len(games)} games) ==")
    memory(env, games, args.resets)
    env.close()
    print("== 3. generator throughput ==")
    throughput(args.generate)


if __name__ == "__main__":
    main()
