"""ALFWorld at the full split: one pass over distinct games with the compiled-game store cold, then warm.

    PYTHONPATH=. python benchmarks/alfworld_cache_bench.py [--games 512] [--split 3553] [--steps 30]
        [--data DIR] [--precompile-workers 2] [--episodes-per-game 8] [--out DIR]

The split is ``--data`` when it holds ``json_2.1.1/train`` in alfworld-download's layout (the real 3,553 training
games; ``--games`` of them sampled with seed 0), else a ``--split``-entry split in that layout whose first
``--games`` entries are new games of ALFRED's room size (``difficulty="medium"``: 28+ receptacles, made without the
planner) and the rest links to them. The env lists the split, then plays the ``--games`` distinct games, one episode
each: a seeded walk of up to ``--steps`` admissible commands (a cheap policy: what is left is
the env's own time). Each pass runs in a fresh process, so the in-process cache of 32 games helps neither:

1. cold: an empty store (every game compiled on its first reset, and written);
2. warm: the same store again (every game read);
3. with ``--precompile-workers N``: ``precompile`` into a new empty store in N worker processes (its wall time),
   then a pass on it;
4. with ``--episodes-per-game N``: the warm store again, each game played N times in a row (different walks), as
   the N samples of a GRPO group on one env process play it: read once, then from the in-process cache.

Reported per pass: time from the env's construction to its first step, total env time (resets and steps, wall and
this process's CPU time), the time inside ``engine.compile`` and its share of env time, and that per game. Every
pass plays the same games with the same commands; the observations of every pass are checked equal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PASS = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import gymnasium as gym
import numpy as np
import agentgym_r1
from agentgym_r1.envs.alfworld.engine import import_textworld
import_textworld()
root, store, listed, steps, episodes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
files = json.loads(open(listed).read())
t1 = time.perf_counter()
env = gym.make("AgentR1/ALFWorld-v1", source=root, split="train", compile_cache=store)
engine = env.unwrapped.engine
compile_time = [0.0, 0.0]
plain = engine.compile
def timed(path):
    t, c = time.perf_counter(), time.process_time()
    try:
        return plain(path)
    finally:
        compile_time[0] += time.perf_counter() - t
        compile_time[1] += time.process_time() - c
engine.compile = timed
env_wall = env_cpu = 0.0
first_step = None
digest = __import__("hashlib").sha256()
first = __import__("hashlib").sha256()  # each game's first episode only: the same walk as a one-episode pass
for n, path in enumerate(files):
  for e in range(episodes):  # a game's later episodes: the in-process cache, as a GRPO group on one env process
    rng = np.random.default_rng([n, e] if e else n)
    t, c = time.perf_counter(), time.process_time()
    obs, info = env.reset(options={"game_file": path})
    env_wall += time.perf_counter() - t
    env_cpu += time.process_time() - c
    digest.update(obs.encode())
    if e == 0:
        first.update(obs.encode())
    for _ in range(steps):
        admissible = info["env"]["admissible_commands"]
        command = admissible[rng.integers(len(admissible))]
        t, c = time.perf_counter(), time.process_time()
        obs, reward, terminated, truncated, info = env.step(command)
        env_wall += time.perf_counter() - t
        env_cpu += time.process_time() - c
        if first_step is None:
            first_step = time.perf_counter() - t1
        digest.update(obs.encode())
        if e == 0:
            first.update(obs.encode())
        if terminated or truncated:
            break
    if e == episodes - 1 and (n + 1) % 16 == 0:
        print(f"    {n + 1} games, env {env_wall:.1f} s, compile {compile_time[0]:.1f} s", file=sys.stderr, flush=True)
print(json.dumps({
    "imports_s": t1 - t0, "split": len(env.unwrapped.games), "games": len(files), "first_step_s": first_step,
    "env_wall_s": env_wall, "env_cpu_s": env_cpu, "compile_wall_s": compile_time[0], "compile_cpu_s": compile_time[1],
    "stats": dict(env.unwrapped.store.stats), "observations": digest.hexdigest(), "first": first.hexdigest(),
}))
"""


def make_split(root: Path, size: int, distinct: int) -> list[str]:
    """A ``size``-game ``json_2.1.1/train`` split in alfworld-download's layout: ``distinct`` new medium-difficulty
    games, the rest of the entries links to them (listing the split costs what it costs on the real one); returns
    the distinct games' files."""
    from agentgym_r1.envs.alfworld.generator import LEVELS, TASK_TYPES, generate, task_type_of

    split = root / "json_2.1.1" / "train"
    files = []
    for i in range(size):
        trial = split / f"{task_type_of(i, TASK_TYPES)}-Generated-None-Room-{i}" / "trial_0"
        trial.mkdir(parents=True)
        if i < distinct:
            os.replace(generate(38, i, TASK_TYPES, root / "made", LEVELS["medium"]), trial / "game.tw-pddl")
            files.append(str(trial / "game.tw-pddl"))
        else:
            os.symlink(files[i % distinct], trial / "game.tw-pddl")
    return files


def run_pass(label: str, root: Path, store: Path, listed: Path, steps: int, episodes: int = 1) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", PASS, str(root), str(store), str(listed), str(steps), str(episodes)],
        check=True,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t
    share = result["compile_wall_s"] / result["env_wall_s"]
    share_cpu = result["compile_cpu_s"] / result["env_cpu_s"]
    print(
        f"  {label:10s} {result['games']} games of {result['split']}: first step {result['first_step_s']:.2f} s "
        f"after the env's construction (imports {result['imports_s']:.2f} s before it); env time "
        f"{result['env_wall_s']:.1f} s wall / {result['env_cpu_s']:.1f} s CPU, compile {result['compile_wall_s']:.1f} s"
        f" wall / {result['compile_cpu_s']:.1f} s CPU = {100 * share:.1f}% of env time ({100 * share_cpu:.1f}% of CPU)"
        f"; per game compile {1e3 * result['compile_wall_s'] / result['games']:.1f} ms, env "
        f"{1e3 * result['env_wall_s'] / result['games']:.1f} ms; store {result['stats']}",
        flush=True,
    )
    games = result["games"]
    print(  # the CPU rows per game: what a loaded machine still measures (wall time there is mostly waiting)
        f"  {label:10s} CPU per game: compile or read {1e3 * result['compile_cpu_s'] / games:.2f} ms, the episode "
        f"(reset and steps, without it) {1e3 * (result['env_cpu_s'] - result['compile_cpu_s']) / games:.2f} ms, "
        f"env {1e3 * result['env_cpu_s'] / games:.2f} ms",
        flush=True,
    )
    return result


def store_size(store: Path) -> str:
    sizes = [p.stat().st_size for p in store.rglob("*.game")]
    return f"{len(sizes)} entries, {sum(sizes) / 2**20:.1f} MiB ({np.mean(sizes) / 1024:.0f} KiB each)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=512)
    parser.add_argument("--split", type=int, default=3553)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--episodes-per-game",
        type=int,
        default=1,
        help="also a warm pass playing each game this many times in a row (a GRPO group on one env process)",
    )
    parser.add_argument("--data", default=None, help="a directory with json_2.1.1/train (the real split)")
    parser.add_argument("--precompile-workers", type=int, default=0)
    parser.add_argument("--out", default=None, help="keep the split and stores here (default: a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.out or tmp)
        if args.data and (Path(args.data) / "json_2.1.1" / "train").is_dir():
            from agentgym_r1.envs.alfworld.data import list_games
            from agentgym_r1.envs.alfworld.generator import TASK_TYPES

            root = Path(args.data)
            listed = list_games(str((root / "json_2.1.1" / "train").resolve()), TASK_TYPES)
            order = np.random.default_rng(0).permutation(len(listed))[: args.games]
            files = [listed[int(i)].meta["game_file"] for i in order]
            print(f"split: the real layout under {root}, {args.games} games sampled with seed 0")
        else:
            t = time.perf_counter()
            root = work / "split"
            made = root / "files.json"  # a split kept under --out from an earlier run is reused
            files = json.loads(made.read_text()) if made.is_file() else make_split(root, args.split, args.games)
            made.write_text(json.dumps(files))
            print(
                f"split: {args.split} entries, {args.games} new medium games, made in {time.perf_counter() - t:.1f} s"
            )
        listing = work / "games.json"
        listing.write_text(json.dumps(files))
        store = work / "store"
        print(f"one pass over {len(files)} distinct games, up to {args.steps} steps each, in a fresh process:")
        cold = run_pass("cold", root, store, listing, args.steps)
        print(f"  store after the cold pass: {store_size(store)}")
        warm = run_pass("warm", root, store, listing, args.steps)
        passes = [cold, warm]
        if args.precompile_workers:
            from agentgym_r1.envs.alfworld.precompile import precompile

            report = precompile(files, workers=args.precompile_workers, compile_cache=work / "store-ahead")
            print(
                f"  precompile: {report.compiled} games in {report.seconds:.1f} s with {args.precompile_workers} "
                f"workers ({report.cached} cached, {len(report.failed)} failed)"
            )
            passes.append(run_pass("ahead", root, work / "store-ahead", listing, args.steps))
        if args.episodes_per_game > 1:
            n = args.episodes_per_game
            grouped = run_pass(f"warm x{n}", root, store, listing, args.steps, n)
            assert grouped["first"] == warm["observations"], "a game's first episode differs from the one-episode pass"
            print(f"  (warm x{n}: each game played {n} times in a row, read once; per game figures cover the {n})")
        same = len({p["observations"] for p in passes}) == 1
        print(f"  every pass saw the same observations: {same}")
        print(
            f"  warm against cold: first step {cold['first_step_s'] / warm['first_step_s']:.1f}x sooner, env time "
            f"{cold['env_wall_s'] / warm['env_wall_s']:.1f}x less (CPU {cold['env_cpu_s'] / warm['env_cpu_s']:.1f}x)"
        )
        assert same, "a pass saw different observations"


if __name__ == "__main__":
    main()
