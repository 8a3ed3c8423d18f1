"""A scripted full-knowledge expert for ALFWorld: the commands that solve a game, read off its initial facts.

ALFWorld's planner expert (fast-downward's ``replan``) is exact but can take a minute on a large room. This expert
reads the goal's classes from the PDDL goal and the objects' places from the initial facts, then walks the task
type's recipe: go to the object, open its receptacle if needed, take it, heat/cool/clean it at the microwave,
fridge or sink, then go to a target receptacle and put it there (or turn on the lamp). Commands use the game's own
templates, so the older ``put {o} in/on {r}`` and the newer ``move {o} to {r}`` grammars both work. It returns
``None`` when the recipe does not fit (a goal it cannot read); the caller then falls back to the planner.
"""

from __future__ import annotations

import re
from collections import defaultdict

from agentgym_r1.envs.alfworld.engine import CompiledGame

STATIONS = {
    "pick_heat_then_place_in_recep": ("heatobject", "microwavetype"),
    "pick_cool_then_place_in_recep": ("coolobject", "fridgetype"),
    "pick_clean_then_place_in_recep": ("cleanobject", "sinkbasintype"),
}
_GOAL_OBJECT = re.compile(r"\(objectType \?o\d? (\w+)\)", re.I)
_GOAL_RECEP = re.compile(r"\(receptacleType \?r (\w+)\)", re.I)
_GOAL_TOGGLE = re.compile(r"\(objectType \?ot (\w+)\)", re.I)


def _goal(problem: str) -> tuple[str | None, str | None, str | None]:
    goal = problem[problem.lower().rfind("(:goal") :]
    found = [p.search(goal) for p in (_GOAL_OBJECT, _GOAL_RECEP, _GOAL_TOGGLE)]
    obj, recep, toggle = (m.group(1).lower() if m else None for m in found)
    return obj, recep, toggle


class _Facts:
    def __init__(self, game: CompiledGame) -> None:
        self.of_type: dict[str, list[str]] = defaultdict(list)
        self.inside: dict[str, list[str]] = defaultdict(list)
        self.openable: set[str] = set()
        for fact in game.pristine.facts:
            args = [v.name for v in fact.arguments]
            if fact.name in ("objecttype", "receptacletype"):
                self.of_type[args[1]].append(args[0])
            elif fact.name == "inreceptacle":
                self.inside[args[0]].append(args[1])
            elif fact.name == "openable":
                self.openable.add(args[0])
        for ids in (*self.of_type.values(), *self.inside.values()):
            ids.sort()


class _Recipe:
    def __init__(self, game: CompiledGame, facts: _Facts) -> None:
        self.game, self.facts = game, facts
        self.commands: list[str] = []
        self.here: str | None = None
        self.opened: set[str] = set()

    def say(self, action: str, **ids: str) -> None:
        names = {k: self.game.entity_infos[v].name for k, v in ids.items()}
        template = "go to {r}" if action == "gotolocation" else self.game.logic.actions[action].template
        self.commands.append(template.format(**names))

    def reach(self, receptacle: str) -> None:
        if self.here != receptacle:
            self.say("gotolocation", r=receptacle)
            self.here = receptacle
        if receptacle in self.facts.openable and receptacle not in self.opened:
            self.say("openobject", r=receptacle)
            self.opened.add(receptacle)


def scripted_plan(game: CompiledGame, task_type: str | None) -> list[str] | None:
    """The commands that win ``game`` from its initial state, or ``None`` when this expert cannot tell."""
    obj, recep, toggle = _goal(game.data["pddl_problem"])
    facts = _Facts(game)
    objects = [o for o in facts.of_type.get(obj or "", []) if facts.inside.get(o)]
    targets = facts.of_type.get(recep or "", [])
    wanted = 2 if task_type == "pick_two_obj_and_place" else 1
    if len(objects) < wanted or not (targets or toggle):
        return None
    objects.sort(key=lambda o: any(r in targets for r in facts.inside[o]))  # prefer objects not yet in place
    recipe = _Recipe(game, facts)
    for o in objects[:wanted]:
        source = next((r for r in facts.inside[o] if r not in targets), facts.inside[o][0])
        recipe.reach(source)
        recipe.say("pickupobject", o=o, r=source)
        if task_type in STATIONS:
            action, station_type = STATIONS[task_type]
            stations = facts.of_type.get(station_type, [])
            if not stations:
                return None
            recipe.reach(stations[0])
            recipe.say(action, o=o, r=stations[0])
        if task_type == "look_at_obj_in_light":
            lamps = [lamp for lamp in facts.of_type.get(toggle or "", []) if facts.inside.get(lamp)]
            if not lamps:
                return None
            recipe.reach(facts.inside[lamps[0]][0])
            recipe.say("toggleobject", o=lamps[0])
        else:
            recipe.reach(targets[0])  # both objects of pick-two go to the same receptacle
            recipe.say("putobject", o=o, r=targets[0])
    return recipe.commands


def plan_for(game: CompiledGame, task_type: str | None) -> list[str] | None:
    """The game's walkthrough when it has one, else the scripted expert's plan."""
    return game.walkthrough or scripted_plan(game, task_type)
