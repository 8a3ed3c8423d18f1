"""The games of the ALFWorld proof (``benchmarks/train_alfworld_proof.py``): training games, and held-out games whose
layouts and goal objects no training game has, with the check that stops a run whose held-out set overlaps training.

A generated game is ``(generator seed, index)`` of :mod:`agentgym_r1.envs.alfworld.generator` (``easy`` level: the
planner's walkthrough is its expert plan), read back from the generator's cache. Its keys (:class:`GameKey`):

* **layout**: the room type and its receptacle inventory (each receptacle class with its count: "kitchen, 3 cabinets,
  2 countertops, 1 fridge, ..."), which is what the first observation lists;
* **objects**: the set of object classes in the room (the goal's and the distractors');
* **goal**: the class of the object the task asks for (``Potato`` in "heat some potato and put it in countertop").

**What "unseen" means here.** A held-out game is unseen when (1) its goal class is one of :data:`HELD_OUT_GOALS`, which
no training game has as its goal (training games with such a goal are skipped), (2) its layout is no training game's
layout, and (3) its object set is no training game's object set. The held-out goal classes may stand in training rooms
as distractors (the model has read the word, never been asked to fetch it), and receptacle classes are shared by all
rooms (every kitchen has a fridge): a held-out room is a new inventory of known kinds of furniture, not new furniture.

:func:`check_disjoint` re-checks (1)-(3) for any pair of sets and raises
:class:`~agentgym_r1.error.HeldOutOverlapError` naming the first overlaps; the proof calls it before any training
or evaluation.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_r1.error import HeldOutOverlapError, StudyError

# About a fifth of the 56 classes a generated goal can name, chosen so that every task type keeps some held-out goals
# (heat: 2 of its 8 classes; cool: 2 of 13; clean: 4 of 21; the others: 11 of 55-56). Fixed before any run.
HELD_OUT_GOALS = frozenset(
    {"Book", "CellPhone", "Cup", "Kettle", "KeyChain", "Pillow", "Potato", "Spatula", "SprayBottle", "Vase", "Watch"}
)
SHOWN = 5  # overlaps named in an error
TRIES_PER_GAME = 100  # a draw gives up after this many candidates per game asked (a goal list or rule too narrow)
_RECEP = re.compile(r"\(receptacleType \S+ (\w+)Type\)")
_OBJECT = re.compile(r"\(objectType \S+ (\w+)Type\)")


@dataclass(frozen=True)
class GameKey:
    """One generated game and what the disjointness check compares (see the module docstring)."""

    seed: int
    index: int
    task_type: str
    goal: str
    layout: tuple[str, tuple[tuple[str, int], ...]]
    objects: frozenset[str]
    task: str  # the task text ("put a bread in sidetable")

    @property
    def name(self) -> str:
        return f"seed {self.seed} index {self.index} ({self.task!r})"

    def to_json(self) -> dict[str, Any]:
        room, inventory = self.layout
        return {
            "seed": self.seed,
            "index": self.index,
            "task_type": self.task_type,
            "goal": self.goal,
            "task": self.task,
            "room": room,
            "receptacles": dict(inventory),
            "objects": sorted(self.objects),
        }


def game_key(seed: int, index: int, cache_dir: str | None = None) -> GameKey:
    """The keys of generated game ``index`` under generator ``seed`` (generated and cached on first use: about a
    second of fast-downward; then a file read)."""
    from agentgym_r1.envs.alfworld.generator import TASK_TYPES, generate, make_game

    data = json.loads(Path(generate(seed, index, TASK_TYPES, cache_dir)).read_text(encoding="utf-8"))
    made = make_game(seed, index, data["task_type"], data["generator"]["attempt"])  # the spec: room and goal class
    assert made is not None, "a kept game's own attempt hosts its task"
    spec, _ = made
    problem = data["pddl_problem"]
    inventory = tuple(sorted(Counter(_RECEP.findall(problem)).items()))
    objects = frozenset(_OBJECT.findall(problem))
    return GameKey(seed, index, data["task_type"], spec.obj, (spec.room, inventory), objects, spec.description)


def first_goal(seed: int, index: int) -> str | None:
    """The goal class of the generator's first try at game ``index`` (no planner run: a cheap pre-filter; the game
    kept may come from a later try, so :func:`game_key` has the last word)."""
    from agentgym_r1.envs.alfworld.generator import TASK_TYPES, make_game, task_type_of

    made = make_game(seed, index, task_type_of(index, TASK_TYPES), 0)
    return made[0].obj if made is not None else None


def training_games(seed: int, n: int, cache_dir: str | None = None) -> tuple[list[GameKey], int]:
    """The first ``n`` games of generator ``seed`` whose goal is not a held-out goal, and how many were skipped."""
    games: list[GameKey] = []
    skipped, index = 0, 0
    while len(games) < n:
        give_up(seed, index, n, len(games))
        if first_goal(seed, index) in HELD_OUT_GOALS:
            skipped += 1
        else:
            key = game_key(seed, index, cache_dir)
            if key.goal in HELD_OUT_GOALS:
                skipped += 1
            else:
                games.append(key)
        index += 1
    return games, skipped


def held_out_games(
    seed: int, n: int, training: list[GameKey], cache_dir: str | None = None
) -> tuple[list[GameKey], dict[str, int]]:
    """The first ``n`` games of generator ``seed`` that are unseen by ``training`` (a held-out goal, a new layout, a
    new object set); and the counts of what was skipped, by reason."""
    layouts, object_sets = {g.layout for g in training}, {g.objects for g in training}
    games: list[GameKey] = []
    skipped = Counter({"goal_trained": 0, "layout_trained": 0, "objects_trained": 0})
    index = 0
    while len(games) < n:
        give_up(seed, index, n, len(games))
        if first_goal(seed, index) not in HELD_OUT_GOALS:
            skipped["goal_trained"] += 1
        else:
            key = game_key(seed, index, cache_dir)
            if key.goal not in HELD_OUT_GOALS:
                skipped["goal_trained"] += 1
            elif key.layout in layouts:
                skipped["layout_trained"] += 1
            elif key.objects in object_sets:
                skipped["objects_trained"] += 1
            else:
                games.append(key)
        index += 1
    return games, {"held_out": n, "candidates": index, **skipped}


def give_up(seed: int, candidates: int, n: int, found: int) -> None:
    """Stop a draw that has looked at :data:`TRIES_PER_GAME` candidates per game asked (the loops are bounded)."""
    if candidates >= TRIES_PER_GAME * max(n, 1):
        raise StudyError(
            f"generator seed {seed}: {found} of {n} games found in {candidates} candidates; the held-out goal "
            f"classes {sorted(HELD_OUT_GOALS)} or the training layouts leave too few games: ask for fewer"
        )


def check_disjoint(training: list[GameKey], held_out: list[GameKey], name: str) -> None:
    """Raise :class:`~agentgym_r1.error.HeldOutOverlapError` if a game of ``held_out`` (the set called ``name``) is a
    training game, has a training game's goal class, layout or object set; the message names the first overlaps."""
    by_game = {(g.seed, g.index): g for g in training}
    goals: dict[str, GameKey] = {}
    layouts: dict[tuple[str, tuple[tuple[str, int], ...]], GameKey] = {}
    object_sets: dict[frozenset[str], GameKey] = {}
    for g in training:
        goals.setdefault(g.goal, g)
        layouts.setdefault(g.layout, g)
        object_sets.setdefault(g.objects, g)
    overlaps = []
    for g in held_out:
        if (g.seed, g.index) in by_game:
            overlaps.append(f"{g.name} is a training game")
        if g.goal in goals:
            overlaps.append(f"{g.name} asks for a {g.goal}, the goal of training game {goals[g.goal].name}")
        if g.layout in layouts:
            overlaps.append(f"{g.name} has the layout {g.layout} of training game {layouts[g.layout].name}")
        if g.objects in object_sets:
            overlaps.append(f"{g.name} has the object set of training game {object_sets[g.objects].name}")
    if overlaps:
        raise HeldOutOverlapError(
            f"held-out set {name!r} overlaps training in {len(overlaps)} way(s): {'; '.join(overlaps[:SHOWN])}"
            f"{'; ...' if len(overlaps) > SHOWN else ''}. Draw it with held_out_games (a held-out goal class, a new "
            f"layout and object set) or from another generator seed"
        )
