"""The fast ALFWorld engine against TextWorld's own, in full: seeded random walks, every state compared.

    PYTHONPATH=. python benchmarks/alfworld_parity.py [--data ../shared/data/alfworld] [--walks 2] [--steps 100]
        [--generated 200] [--seed 0] [--start 0] [--no-real]

Every shared real game (``json_2.1.1/*/*/*/game.tw-pddl`` under ``--data``) and ``--generated`` generated games
(seed ``--seed``, cached under the default cache directory) are played by both engines: ``--walks`` random walks of
``--steps`` steps each, a quarter of the commands invalid (garbage, real verbs on any entity, padded or upper-cased
commands). Observation, admissible commands (and their unsorted order), score, won and done must be equal at every
state (:mod:`agentgym_r1.envs.alfworld.parity`). Prints one line per game and a summary; exits 1 on the first
mismatch, printing it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from agentgym_r1.envs.alfworld.engine import Engine
from agentgym_r1.envs.alfworld.fast import FastEngine
from agentgym_r1.envs.alfworld.generator import TASK_TYPES, generate
from agentgym_r1.envs.alfworld.parity import compare_walks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "alfworld")
    )
    parser.add_argument("--walks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--generated", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first generated game index (to resume a run)")
    parser.add_argument("--no-real", action="store_true", help="skip the real games")
    args = parser.parse_args()
    real = [] if args.no_real else [str(p) for p in sorted(Path(args.data).glob("json_2.1.1/*/*/*/game.tw-pddl"))]
    print(
        f"{len(real)} real games under {args.data}, {args.generated} generated (seed {args.seed}); "
        f"{args.walks} walks x {args.steps} steps each",
        flush=True,
    )
    stock, fast = Engine(), FastEngine()
    total, start = 0, time.perf_counter()
    games = [("real", path) for path in real] + [
        ("generated", i) for i in range(args.start, args.start + args.generated)
    ]
    for n, (kind, game) in enumerate(games):
        path = game if kind == "real" else str(generate(args.seed, int(game), TASK_TYPES))
        mismatch, compared = compare_walks(stock, fast, path, args.walks, args.steps, seed=n)
        total += compared
        print(
            f"[{n + 1}/{len(games)}] {kind} {Path(path).parent.name if kind == 'real' else path}: "
            f"{compared} states equal"
            if mismatch is None
            else f"MISMATCH\n{mismatch}",
            flush=True,
        )
        if mismatch is not None:
            return 1
    print(f"all {len(games)} games equal: {total} states compared in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
