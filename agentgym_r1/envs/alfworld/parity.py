"""Step-by-step parity of two ALFWorld engines: seeded random walks that mix admissible and invalid commands.

Both engines play the same game from reset, receive the same command strings, and every state is compared on
:data:`KEYS`. ``tests/envs/test_alfworld_fast.py`` runs a subset; ``benchmarks/alfworld_parity.py`` runs all the
shared real games and as many generated ones as asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

KEYS = ("feedback", "admissible_commands", "_valid_commands", "won", "score", "done")
GARBAGE = (
    "",
    "look around",
    "take the moon",
    "go to",
    "put",
    "open door 99",
    "examine",
    "inventory please",
    "Take Apple 1",
    "go  to desk 1",
    "heat",
    "use",
)


@dataclass(frozen=True)
class Mismatch:
    game: str
    walk: int
    step: int  # -1 at reset
    command: str | None
    key: str
    expected: Any
    got: Any

    def __str__(self) -> str:
        where = "reset" if self.step < 0 else f"step {self.step} ({self.command!r})"
        return (
            f"{self.game}: walk {self.walk}, {where}: {self.key} differs\n  stock: {self.expected!r}\n"
            f"  fast:  {self.got!r}"
        )


def _differ(a: Any, b: Any) -> str | None:
    for key in KEYS:
        if (key in a or key in b) and a.get(key) != b.get(key):
            return key
    return None


def invalid_command(rng: np.random.Generator, admissible: list[str], names: list[str]) -> str:
    """A command that is (almost always) not admissible now: garbage, a real verb on any entity, a padded one."""
    kind = rng.integers(4)
    if kind == 0:
        return str(GARBAGE[rng.integers(len(GARBAGE))])
    if kind == 1:
        verb = (
            "take {} from {}",
            "put {} in/on {}",
            "open {}",
            "go to {}",
            "examine {}",
            "heat {} with {}",
            "move {} to {}",
            "use {}",
        )[rng.integers(8)]
        return verb.format(*(names[rng.integers(len(names))] for _ in range(verb.count("{}"))))
    if kind == 2:  # padded: stripped to an admissible command by the engine
        return f"  {admissible[rng.integers(len(admissible))]} "
    return str(admissible[rng.integers(len(admissible))]).upper()


def compare_walks(
    stock: Any, fast: Any, game_file: str, walks: int, steps: int, seed: int, invalid_share: float = 0.25
) -> tuple[Mismatch | None, int]:
    """Play ``walks`` seeded random walks of ``steps`` on both engines; the first mismatch (or None) and the number
    of states compared."""
    game = stock.compile(game_file)
    fast_game = fast.compile(game_file)
    names = sorted(game.names)
    compared = 0
    for walk in range(walks):
        rng = np.random.default_rng([seed, walk])
        a, b = stock.reset(game), fast.reset(fast_game)
        compared += 1
        key = _differ(a, b)
        if key:
            return Mismatch(game_file, walk, -1, None, key, a.get(key), b.get(key)), compared
        for step in range(steps):
            admissible = a["admissible_commands"]
            if rng.random() < invalid_share:
                command = invalid_command(rng, admissible, names)
            else:
                command = str(admissible[rng.integers(len(admissible))])
            a, b = stock.step(command), fast.step(command)
            compared += 1
            key = _differ(a, b)
            if key:
                return Mismatch(game_file, walk, step, command, key, a.get(key), b.get(key)), compared
            if a["done"]:
                break
    return None, compared
