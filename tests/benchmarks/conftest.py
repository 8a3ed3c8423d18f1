"""The benchmark scripts import their sibling modules (``study``, ``hotpotqa_splits``) as a script run puts
``benchmarks/`` first on ``sys.path``; tests that load a script from its file need the same."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)
