"""Wall time of the README's main job, ``agentgym-r1 leaderboard run --suite quick`` (target: under 3 minutes).

Runs the command into a fresh results file and prints the total wall time, then per env the time its episodes took
(summed over its policies) and the episodes stored. Run from the repository root:

    PYTHONPATH=. python benchmarks/leaderboard_bench.py [--suite quick] [--workers N]
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "lb.sqlite"
        cmd = [sys.executable, "-m", "agentgym_r1.cli", "leaderboard", "run", "--suite", args.suite,
               "--results", str(results)] + (["--workers", args.workers] if args.workers else [])
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": "."}, check=False)
        wall = time.perf_counter() - t0
        print(f"leaderboard run --suite {args.suite}: exit {done.returncode}, wall {wall:.1f} s "
              f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})")
        db = sqlite3.connect(results)
        rows = db.execute("SELECT r.env_id, r.status, count(e.idx), coalesce(sum(e.seconds), 0) FROM runs r "
                          "LEFT JOIN episodes e ON e.run_id = r.id GROUP BY r.env_id, r.status ORDER BY r.env_id")
        for env_id, status, episodes, seconds in rows:
            print(f"  {env_id:22s} {status:8s} {episodes:4d} episodes  {seconds:7.1f} s in episodes")
        print(done.stdout.splitlines()[-1] if done.stdout else done.stderr[-2000:])


if __name__ == "__main__":
    main()
