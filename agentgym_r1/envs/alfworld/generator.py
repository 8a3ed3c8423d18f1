"""New ALFWorld games, generated on demand: PDDL problems for the six task types over generated rooms.

A game is a ``game.tw-pddl`` file in ALFWorld's format (``pddl_domain``, ``grammar``, ``pddl_problem``, ``solvable``,
``walkthrough``) written with the PDDL domain and grammar that ship with the ``alfworld`` package. The room (kitchen,
living room, bedroom or bathroom) gets receptacles, each at its own location, and objects placed where ALFRED allows
them (``alfworld.gen.constants``); the goal is ALFWorld's own goal for the task type (``alfworld.gen.goal_library``)
and the task text one of its templates. Every game is solved by fast-downward (through TextWorld) and the plan is
replayed on the engine until the game is won before the file is kept: the plan is the game's ``walkthrough``.

Game ``index`` under ``seed`` is a pure function of both (and of the task types and difficulty asked for). Files are
cached under ``cache_dir`` so a game is generated once per machine.

Difficulty (:class:`Knobs`, levels in :data:`LEVELS`): rooms of ALFRED's size and beyond (more cabinets, drawers,
shelves), the goal's objects hidden in closed receptacles, no spare object of the goal's class, more distractor
objects. ``easy`` is the original generator, draw for draw, solved by the planner. The other levels are solvable by
construction: the goal's objects lie in receptacles, the target, the station (sink, microwave, fridge) or the lamp is
in the room, which is all the scripted expert (:mod:`~agentgym_r1.envs.alfworld.expert`) needs; no planner runs, so
a game is made in milliseconds. Tests replay that plan on the engine for some seeds of every level.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_r1.core.difficulty import check_int, check_order, check_rate
from agentgym_r1.envs.alfworld.compiled import cache_root
from agentgym_r1.envs.alfworld.engine import CompiledGame, Engine, compile_data, import_textworld, remember
from agentgym_r1.error import AgentGymError, ConfigError

GENERATOR_VERSION = 1
MAX_ATTEMPTS = 8
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# Receptacle classes of each room: (class, fewest, most).
ROOMS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "kitchen": (
        ("CounterTop", 1, 3),
        ("Cabinet", 2, 6),
        ("Drawer", 1, 4),
        ("Fridge", 1, 1),
        ("Microwave", 1, 1),
        ("SinkBasin", 1, 1),
        ("StoveBurner", 1, 4),
        ("DiningTable", 0, 1),
        ("GarbageCan", 1, 1),
        ("CoffeeMachine", 0, 1),
        ("Toaster", 0, 1),
        ("Shelf", 0, 3),
    ),
    "livingroom": (
        ("Sofa", 1, 1),
        ("CoffeeTable", 1, 1),
        ("SideTable", 1, 2),
        ("TVStand", 0, 1),
        ("ArmChair", 0, 2),
        ("Drawer", 0, 4),
        ("Cabinet", 0, 4),
        ("Shelf", 0, 4),
        ("GarbageCan", 1, 1),
        ("Dresser", 0, 1),
        ("Ottoman", 0, 1),
    ),
    "bedroom": (
        ("Bed", 1, 1),
        ("Desk", 1, 2),
        ("Drawer", 1, 6),
        ("Dresser", 0, 1),
        ("Shelf", 0, 6),
        ("SideTable", 0, 2),
        ("GarbageCan", 1, 1),
        ("LaundryHamper", 0, 1),
        ("Safe", 0, 1),
        ("ArmChair", 0, 1),
    ),
    "bathroom": (
        ("CounterTop", 1, 1),
        ("SinkBasin", 1, 2),
        ("Cabinet", 1, 4),
        ("Drawer", 0, 4),
        ("Toilet", 1, 1),
        ("ToiletPaperHanger", 1, 1),
        ("TowelHolder", 0, 1),
        ("HandTowelHolder", 0, 1),
        ("GarbageCan", 1, 1),
        ("BathtubBasin", 0, 1),
        ("Shelf", 0, 2),
    ),
}
TASK_ROOMS = {
    "pick_and_place_simple": ("kitchen", "livingroom", "bedroom", "bathroom"),
    "pick_two_obj_and_place": ("kitchen", "livingroom", "bedroom", "bathroom"),
    "look_at_obj_in_light": ("livingroom", "bedroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
}
# The state-change tasks: the property the object needs, and the receptacle class that gives it.
CHANGES = {
    "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
    "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
    "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
}
LAMP, LAMP_HOSTS = "DeskLamp", ("Desk", "SideTable", "Dresser")
# Types the domain names in preconditions: they must exist in every problem.
DOMAIN_RTYPES, DOMAIN_OTYPES = ("SinkBasin", "Microwave", "Fridge"), ("Knife", "ButterKnife")
BASINS = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}  # ALFRED names basins after their sink or tub


# Classes a room can have more of (ALFRED's kitchens have up to ~20 cabinets and ~15 drawers).
REPEATABLE = ("Cabinet", "Drawer", "Shelf", "CounterTop", "SideTable", "StoveBurner", "Desk", "Dresser", "ArmChair")
CLOSED = ("Cabinet", "Drawer")


@dataclasses.dataclass(frozen=True)
class Knobs:
    """What makes a generated game harder. ``min_receptacles``: receptacles added (of the room's repeatable classes)
    until the room has this many (0: the room's own draw); ``closed``: the chance that each goal object is hidden in
    a closed receptacle that can hold it; ``spare_goal_objects``: at most this many objects of the goal's class
    beyond those the task needs; ``min_distractors``/``max_distractors``: other objects in the room."""

    min_receptacles: int = 0
    closed: float = 0.0
    spare_goal_objects: int = 1
    min_distractors: int = 6
    max_distractors: int = 15

    def __post_init__(self) -> None:
        check_int("ALFWorld generated", "min_receptacles", self.min_receptacles, 0, MAX_RECEPTACLES)
        check_rate("ALFWorld generated", "closed", self.closed)
        check_int("ALFWorld generated", "spare_goal_objects", self.spare_goal_objects, 0, 4)
        check_int("ALFWorld generated", "min_distractors", self.min_distractors, 0, MAX_DISTRACTORS)
        check_int("ALFWorld generated", "max_distractors", self.max_distractors, 0, MAX_DISTRACTORS)
        check_order("min_distractors", self.min_distractors, "max_distractors", self.max_distractors)

    @property
    def planned(self) -> bool:
        """Whether games are solved by the planner (``easy``, the original generator) or by construction."""
        return self == Knobs()


MAX_RECEPTACLES, MAX_DISTRACTORS = 60, 80
LEVELS = {
    "easy": Knobs(),
    "medium": Knobs(min_receptacles=28, closed=0.0, spare_goal_objects=0, min_distractors=10, max_distractors=25),
    "hard": Knobs(min_receptacles=55, closed=0.0, spare_goal_objects=0, min_distractors=20, max_distractors=40),
}


class GenerationError(AgentGymError, RuntimeError):
    """The generator found no solvable game for an index after ``MAX_ATTEMPTS`` tries (a bug, not bad luck)."""


@dataclasses.dataclass(frozen=True)
class GameSpec:
    """What a generated game asks: the task type, the task text and the goal's classes."""

    task_type: str
    room: str
    description: str
    obj: str
    recep: str | None = None
    toggle: str | None = None


def normalise_task_types(task_types: Any) -> tuple[str, ...]:
    """Task types by name or by ALFWorld's ids 1-6, in ALFWorld's order."""
    if task_types is None:
        return TASK_TYPES
    if isinstance(task_types, str | int):
        task_types = [task_types]
    out = []
    for t in task_types:
        name = TASK_TYPES[t - 1] if isinstance(t, int) and 1 <= t <= 6 else t
        if name not in TASK_TYPES:
            raise ConfigError(f"unknown ALFWorld task type {t!r}; use names from {list(TASK_TYPES)} or ids 1-6")
        out.append(name)
    if not out:
        raise ConfigError(f"task_types is empty; give some of {list(TASK_TYPES)}")
    return tuple(t for t in TASK_TYPES if t in out)


def _constants() -> Any:
    import_textworld()
    import alfworld.gen.constants as constants

    return constants


def _choice(rng: np.random.Generator, items: Any) -> Any:
    items = sorted(items)
    return items[int(rng.integers(len(items)))]


def _room_receptacles(rng: np.random.Generator, room: str, task_type: str, knobs: Knobs) -> list[str]:
    classes = []
    for cls, lo, hi in ROOMS[room]:
        classes += [cls] * int(rng.integers(lo, hi + 1))
    if task_type == "look_at_obj_in_light" and not set(classes) & set(LAMP_HOSTS):
        classes.append(_choice(rng, [h for h in LAMP_HOSTS if h in {c for c, _, _ in ROOMS[room]}]))
    more = [cls for cls, _, _ in ROOMS[room] if cls in REPEATABLE and cls in CLOSED] or [
        cls for cls, _, _ in ROOMS[room] if cls in REPEATABLE
    ]  # as in ALFRED, rooms grow by cabinets and drawers
    while len(classes) < knobs.min_receptacles:  # no draw at all on easy: its rooms stay as they were
        classes.append(_choice(rng, more))
    return sorted(classes, key=[c for c, _, _ in ROOMS[room]].index) if knobs.min_receptacles else classes


def _pick_goal(rng: np.random.Generator, task_type: str, room: str, receps: list[str], c: Any) -> GameSpec | None:
    fits = c.VAL_RECEPTACLE_OBJECTS
    kinds = set(receps)
    placeable = {o for r in kinds for o in fits.get(r, ()) if not o.endswith("Sliced")}
    if task_type == "look_at_obj_in_light":
        obj = _choice(rng, placeable)
        return GameSpec(task_type, room, "", obj, toggle=LAMP)
    prop, station = CHANGES.get(task_type, (None, None))
    if prop is not None:
        placeable &= c.VAL_ACTION_OBJECTS[prop]
    if not placeable:
        return None
    obj = _choice(rng, placeable)
    targets = [r for r in kinds if obj in fits.get(r, ()) and r != station]
    sources = [r for r in kinds if obj in fits.get(r, ())]
    targets = [r for r in targets if any(s != r for s in sources)]
    if not targets:
        return None
    return GameSpec(task_type, room, "", obj, recep=_choice(rng, targets))


def _describe(rng: np.random.Generator, spec: GameSpec) -> str:
    import alfworld.gen.goal_library as glib

    templates = glib.gdict[spec.task_type]["templates"]
    template = templates[int(rng.integers(len(templates)))]
    return template.format(
        obj=spec.obj.lower(), recep=(spec.recep or "").lower(), toggle=(spec.toggle or "").lower(), mrecep=""
    )


def _place_objects(
    rng: np.random.Generator, spec: GameSpec, receps: list[tuple[str, str]], c: Any, knobs: Knobs
) -> list[tuple[str, str, str]]:
    """``(id, class, receptacle id)`` for the goal's objects and some distractors, never already done."""
    fits = c.VAL_RECEPTACLE_OBJECTS
    placed: list[tuple[str, str, str]] = []
    counts: dict[str, int] = {}

    def put(cls: str, allowed: list[tuple[str, str]]) -> None:
        counts[cls] = counts.get(cls, 0) + 1
        rid = allowed[int(rng.integers(len(allowed)))][0]
        placed.append((f"{cls}_bar_{counts[cls]:02d}", cls, rid))

    def homes(cls: str) -> list[tuple[str, str]]:
        return [(rid, r) for rid, r in receps if cls in fits.get(r, ()) and r != spec.recep]

    def hidden(allowed: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if not knobs.closed or rng.random() >= knobs.closed:  # no draw on easy
            return allowed
        return [(rid, r) for rid, r in allowed if r in c.OPENABLE_CLASS_SET] or allowed

    wanted = 2 if spec.task_type == "pick_two_obj_and_place" else 1
    for _ in range(wanted + int(rng.integers(0, knobs.spare_goal_objects + 1))):
        put(spec.obj, hidden(homes(spec.obj)))
    if spec.toggle:
        put(spec.toggle, [(rid, r) for rid, r in receps if r in LAMP_HOSTS])
    pool = sorted({o for _, r in receps for o in fits.get(r, ()) if not o.endswith("Sliced")} - {spec.obj})
    for _ in range(int(rng.integers(knobs.min_distractors, knobs.max_distractors + 1))):
        cls = pool[int(rng.integers(len(pool)))]
        if homes(cls):
            put(cls, homes(cls))
    return placed


def _problem(
    name: str, spec: GameSpec, receps: list[tuple[str, str]], objects: list[tuple[str, str, str]], c: Any
) -> str:
    import alfworld.gen.goal_library as glib

    rtypes = sorted({r for _, r in receps} | set(DOMAIN_RTYPES))
    otypes = sorted({o for _, o, _ in objects} | set(DOMAIN_OTYPES))
    loc = {rid: f"loc_bar_{i + 1}" for i, (rid, _) in enumerate(receps)}
    decl = (
        ["agent1 - agent"]
        + [f"{o}Type - otype" for o in otypes]
        + [f"{r}Type - rtype" for r in rtypes]
        + [f"{oid} - object" for oid, _, _ in objects]
        + [f"{rid} - receptacle" for rid, _ in receps]
        + ["loc_bar_0 - location"]
        + [f"{v} - location" for v in loc.values()]
    )
    init = ["(atLocation agent1 loc_bar_0)"]
    for rid, r in receps:
        init += [f"(receptacleType {rid} {r}Type)", f"(receptacleAtLocation {rid} {loc[rid]})"]
        init += [f"(openable {rid})"] if r in c.OPENABLE_CLASS_SET else []
    for oid, o, rid in objects:
        init += [f"(objectType {oid} {o}Type)", f"(inReceptacle {oid} {rid})", f"(objectAtLocation {oid} {loc[rid]})"]
        init += [f"(toggleable {oid})"] if o in c.VAL_ACTION_OBJECTS["Toggleable"] else [f"(pickupable {oid})"]
        init += [
            f"({p.lower()} {oid})"
            for p in ("Cleanable", "Heatable", "Coolable", "Sliceable")
            if o in c.VAL_ACTION_OBJECTS[p]
        ]
        init += [f"(isReceptacleObject {oid})"] if o in c.MOVABLE_RECEPTACLES_SET else []
    init += [
        f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if o in c.VAL_RECEPTACLE_OBJECTS.get(r, ())
    ]
    goal = (
        glib.gdict[spec.task_type]["pddl"]
        .replace("#", "-")
        .format(obj=spec.obj, recep=spec.recep or "", toggle=spec.toggle or "", mrecep="")
    )
    return (
        f"(define (problem {name})\n(:domain alfred)\n(:objects\n  "
        + "\n  ".join(decl)
        + "\n)\n(:init\n  "
        + "\n  ".join(init)
        + "\n)\n"
        + goal.strip()
        + "\n"
    )


def make_game(
    seed: int, index: int, task_type: str, attempt: int = 0, knobs: Knobs = LEVELS["easy"]
) -> tuple[GameSpec, dict[str, Any]] | None:
    """The spec and the ``game.tw-pddl`` data (no walkthrough yet) of one try; ``None`` when the room cannot host it."""
    c = _constants()
    rng = np.random.default_rng([seed, index, attempt, GENERATOR_VERSION])
    room = _choice(rng, TASK_ROOMS[task_type])
    classes = _room_receptacles(rng, room, task_type, knobs)
    counts: dict[str, int] = {}
    receps = []
    for cls in classes:
        counts[cls] = counts.get(cls, 0) + 1
        head = f"{BASINS[cls]}_bar_{counts[cls]:02d}_bar_{cls}" if cls in BASINS else f"{cls}_bar_{counts[cls]:02d}"
        receps.append((head, cls))
    spec = _pick_goal(rng, task_type, room, classes, c)
    if spec is None:
        return None
    spec = dataclasses.replace(spec, description=_describe(rng, spec))
    objects = _place_objects(rng, spec, receps, c, knobs)
    domain, grammar = shipped_logic()
    problem = _problem(f"gen_{seed}_{index}_{attempt}", spec, receps, objects, c)
    data = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", spec.description),
        "pddl_problem": problem,
        "solvable": False,
        "task_type": task_type,
        "generator": {"version": GENERATOR_VERSION, "seed": seed, "index": index, "attempt": attempt},
    }
    if not knobs.planned:
        data["generator"]["difficulty"] = dataclasses.asdict(knobs)
    return spec, data


def shipped_logic() -> tuple[str, str]:
    """The PDDL domain and the grammar that ship with the ``alfworld`` package."""
    import alfworld

    base = Path(alfworld.__file__).parent / "data"
    return (base / "alfred.pddl").read_text(encoding="utf-8"), (base / "alfred.twl2").read_text(encoding="utf-8")


_VERIFIER: Engine | None = None


def _verifier() -> Engine:
    """The engine that solves and replays generated games (one per process, kept for reuse)."""
    global _VERIFIER
    if _VERIFIER is None:
        _VERIFIER = Engine()
    return _VERIFIER


def solve(engine: Engine, game: CompiledGame) -> list[str] | None:
    """fast-downward's plan for ``game``, replayed on the engine: the plan when it wins, else ``None``."""
    state = engine.reset(game)
    if state["won"]:
        return None
    plan = engine.replan()
    for command in plan:
        if command not in state["admissible_commands"]:
            return None
        state = engine.step(command)
    return plan if plan and state["won"] else None


def default_cache_dir() -> Path:
    return cache_root() / "alfworld"


def game_path(
    cache_dir: str | Path, seed: int, index: int, task_types: tuple[str, ...], knobs: Knobs = LEVELS["easy"]
) -> Path:
    key = ",".join(task_types) + ("" if knobs.planned else json.dumps(dataclasses.asdict(knobs), sort_keys=True))
    tag = hashlib.sha1(key.encode()).hexdigest()[:8]
    return Path(cache_dir) / f"generated-v{GENERATOR_VERSION}" / f"seed{seed}-{tag}" / f"{index}.tw-pddl"


def task_type_of(index: int, task_types: tuple[str, ...]) -> str:
    """Task types cycle with the index, so any window of indices is balanced."""
    return task_types[index % len(task_types)]


def generate(
    seed: int,
    index: int,
    task_types: tuple[str, ...] = TASK_TYPES,
    cache_dir: str | Path | None = None,
    knobs: Knobs = LEVELS["easy"],
) -> Path:
    """The path of game ``index`` under ``seed``: read from the cache, or generated, solved, checked and written."""
    path = game_path(cache_dir or default_cache_dir(), seed, index, task_types, knobs)
    if path.is_file():
        return path
    task_type = task_type_of(index, task_types)
    if not knobs.planned:
        return _generate_by_construction(path, seed, index, task_type, knobs)
    engine = _verifier()
    for attempt in range(MAX_ATTEMPTS):
        made = make_game(seed, index, task_type, attempt)
        if made is None:
            continue
        spec, data = made
        game = compile_data(str(path), data, engine.lib)
        plan = solve(engine, game)
        if plan is None:
            continue
        data.update(solvable=True, walkthrough=plan, task_desc=spec.description)
        _write(path, data)
        remember(game)
        return path
    raise GenerationError(f"no solvable {task_type} game for seed={seed} index={index} after {MAX_ATTEMPTS} tries")


def _generate_by_construction(path: Path, seed: int, index: int, task_type: str, knobs: Knobs) -> Path:
    """A game whose goal objects, target and station the generator placed, so the scripted expert's recipe wins it
    (see the module docstring): written without a planner run."""
    for attempt in range(MAX_ATTEMPTS):
        made = make_game(seed, index, task_type, attempt, knobs)
        if made is not None:
            spec, data = made
            data.update(solvable=True, task_desc=spec.description)
            _write(path, data)
            return path
    raise GenerationError(f"no {task_type} game for seed={seed} index={index} after {MAX_ATTEMPTS} tries")


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)
