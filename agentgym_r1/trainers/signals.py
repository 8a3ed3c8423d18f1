"""Echo Trap signals (RAGEN): in-group reward spread, policy entropy and gradient norm, with a collapse warning.

RAGEN found that multi-turn RL collapses into repeating one response: the in-group reward spread, the entropy and
the gradient norm all fall together before the reward does. :class:`EchoTrapMonitor` keeps each signal's first
``window`` values as a baseline and warns once per signal when the mean of its last ``window`` values falls under
``ratio`` times that baseline.
"""

from __future__ import annotations

import warnings
from collections import deque

SIGNALS = ("rollout/group_reward_std", "entropy", "grad_norm")


class EchoTrapWarning(UserWarning):
    """A training signal collapsed: the policy may be caught in the Echo Trap."""


class EchoTrapMonitor:
    def __init__(self, window: int = 10, ratio: float = 0.1, signals: tuple[str, ...] = SIGNALS) -> None:
        self.window, self.ratio, self.signals = window, ratio, signals
        self.baseline: dict[str, list[float]] = {s: [] for s in signals}
        self.recent: dict[str, deque[float]] = {s: deque(maxlen=window) for s in signals}
        self.warned: set[str] = set()

    def update(self, logs: dict[str, float]) -> list[str]:
        """Feed one log record; returns the signals that collapsed at this record (each warned once)."""
        collapsed = []
        for name in self.signals:
            value = logs.get(name)
            if value is None:
                continue
            base = self.baseline[name]
            if len(base) < self.window:
                base.append(float(value))
                continue
            self.recent[name].append(float(value))
            ref = sum(base) / len(base)
            now = sum(self.recent[name]) / len(self.recent[name])
            if name not in self.warned and len(self.recent[name]) == self.window and ref > 0 and now < self.ratio * ref:
                self.warned.add(name)
                collapsed.append(name)
                warnings.warn(
                    f"Echo Trap: {name} fell to {now:.3g} (baseline {ref:.3g}); the policy may be "
                    "collapsing onto one response. Consider StarPO-S filtering (keep_ratio < 1), a higher "
                    "temperature or an entropy bonus.",
                    EchoTrapWarning,
                    stacklevel=2,
                )
        return collapsed
