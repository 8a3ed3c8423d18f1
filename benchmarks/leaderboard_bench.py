"""Wall time of the README's main job, ``agentgym-r1 leaderboard run --suite quick`` (target: under 8 minutes with
the agent it trains, about 30 s with ``--no-train``).

Runs the command into a fresh results file (and a fresh training folder beside it) and prints the total wall time
with the load average before and after, then per env the time its episodes took (summed over its policies) and the
episodes stored, then the trained agent's lines (SFT and GRPO times, held-out success before and after). Run from
the repository root:

    PYTHONPATH=. python benchmarks/leaderboard_bench.py [--suite quick] [--workers N] [--no-train]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="quick")
    parser.add_argument("--workers", default=None)
    parser.add_argument("--no-train", action="store_true", help="pass --no-train (skip the trained agent)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "lb.sqlite"
        cmd = (
            [
                sys.executable,
                "-m",
                "agentgym_r1.cli",
                "leaderboard",
                "run",
                "--suite",
                args.suite,
                "--results",
                str(results),
            ]
            + (["--workers", args.workers] if args.workers else [])
            + (["--no-train"] if args.no_train else [])
        )
        load = os.getloadavg()
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": "."}, check=False)
        wall = time.perf_counter() - t0
        after = os.getloadavg()
        print(
            f"leaderboard run --suite {args.suite}{' --no-train' if args.no_train else ''}: exit "
            f"{done.returncode}, wall {wall:.1f} s ({os.cpu_count()} cores, load average (1, 5, 15 min) "
            f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} before, {after[0]:.1f} {after[1]:.1f} {after[2]:.1f} after)"
        )
        db = sqlite3.connect(results)
        rows = db.execute(
            "SELECT r.env_id, r.status, count(e.idx), coalesce(sum(e.seconds), 0) FROM runs r "
            "LEFT JOIN episodes e ON e.run_id = r.id GROUP BY r.env_id, r.status ORDER BY r.env_id"
        )
        for env_id, status, episodes, seconds in rows:
            print(f"  {env_id:22s} {status:8s} {episodes:4d} episodes  {seconds:7.1f} s in episodes")
        for line in done.stderr.splitlines():
            if line.startswith("tiny agent:"):
                print(f"  {line}")
        for line in done.stdout.splitlines():
            if line.startswith("Trained in this run"):
                print(f"  {line}")
        print(done.stdout.splitlines()[-1] if done.stdout else done.stderr[-2000:])


if __name__ == "__main__":
    main()
