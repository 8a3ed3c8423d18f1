"""``dist_step``'s fixed-batch step for several algorithms, one after the other in the same processes (the imports
and the process group are paid once): ``python -m tests.trainers.dist_many OUT TMP grpo ppo`` writes
``OUT-grpo.pt`` and ``OUT-ppo.pt``. Run by ``test_nodes.py`` under a one-node and a two-node ``torchrun``, and by
``test_distributed.py`` under one and two processes."""

from __future__ import annotations

import os
import sys

from tests.trainers.dist_step import main

if __name__ == "__main__":
    out, tmp, *algos = sys.argv[1:]
    for algo in algos:
        main(algo, f"{out}-{algo}.pt", os.path.join(tmp, algo))
