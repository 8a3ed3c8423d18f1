"""The fast ALFWorld engine: TextWorld's ``PddlEnv`` text, step for step, from a state machine compiled per game.

Stock ``PddlEnv.step`` (``textworld/envs/pddl/pddl.py``) asks fast-downward's C++ library for the applicable
operators, applies the command's operator there and in its Python facts, derives the feedback with the grammar, then
``_gather_infos`` derives the command text of *every* applicable operator, each derivation parsing its template
with tatsu again. :class:`FastEngine` does the same work from a :class:`FastGame`, compiled once per game and shared
by every env of the process:

* the grounded task as a Python state machine (:class:`~agentgym_r1.envs.alfworld.sas.SasTask`): applicable
  operators kept incrementally and listed in fast-downward's order, effects and axioms as fast-downward applies them;
* the grammar with every string parsed once (:class:`~agentgym_r1.envs.alfworld.textgen.Grammar`), deriving over a
  copy of the same ``PddlState`` facts, updated as ``PddlState.apply`` updates them;
* every operator's command text derived at compile time when its derivation reads only static facts, and an
  operator's feedback kept once derived when it does.

An env's own state is the facts, the SAS values and the applicable set: no copy of fast-downward's 34 MB library
per env (the stock engine loads one each). The library is borrowed from a pool only to compile a game and for the
planner (:meth:`FastEngine.replan`, which replays the episode's operators on it).

The returned ``GameState`` holds what ``PddlEnv`` requested with ``won`` and ``admissible_commands`` holds that
agents read: ``feedback``, ``raw``, ``last_command``, ``command_templates``, ``won``, ``lost``,
``admissible_commands``, ``_valid_commands``, and ``score`` and ``done`` after a step; not the fact and action
objects (``_facts``, ``_valid_actions``, ``_entity_infos``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_r1.envs.alfworld.compiled import GameStore
from agentgym_r1.envs.alfworld.engine import (
    COMPILE_LOCK,
    CompiledGame,
    Engine,
    check_engine,
    compile_game,
    give_lib,
    import_textworld,
    take_lib,
)
from agentgym_r1.envs.alfworld.sas import (
    PackedTexts,
    SasState,
    SasTask,
    UnsupportedGameError,
    atom_fact,
    dynamic_predicates,
)
from agentgym_r1.envs.alfworld.textgen import Grammar

NOTHING_HAPPENS = "Nothing happens."  # PddlEnv.step's answer to a command no applicable operator has


@dataclass(slots=True)
class OperatorText:
    """What one grounded operator needs to be played: its mapping, its fact changes, its texts once static."""

    name: str
    mapping: dict[Any, Any]
    variables: dict[str, Any]
    template: str
    feedback_rule: str
    changes: tuple[tuple[Any, Any], ...]  # (negation, fact) per effect atom, as PddlState.apply updates its facts
    feedback: str | None = None


class FastGame:
    """One game compiled for :class:`FastEngine`; shared, read-only once built (caches fill on first use)."""

    def __init__(self, game: CompiledGame) -> None:
        pristine = game.pristine
        self.game = game
        self.task = SasTask.parse(pristine.sas)
        self.grammar = Grammar(game.logic, game.entity_infos, dynamic_predicates(self.task))
        # PddlState._actions' parameters, as (name, type) pairs: play then needs none of fast-downward's objects, so a
        # stored game decodes the translation only for the planner and the stock engine (engine.Translation)
        self.parameters = {a.name: tuple((p.name, p.type_name) for p in a.parameters) for a in pristine.task.actions}
        self.names = {k: info.name for k, info in game.entity_infos.items()}  # _gather_infos' format mapping
        self.templates = sorted({action.template for action in game.logic.actions.values()})
        self._ops: list[OperatorText | None] = [None] * len(self.task.operators)
        self.initial: tuple[Any, dict[str, int]] | None = None
        self._check()
        self.commands: Sequence[str | None] = self._static_commands()

    def __getstate__(self) -> dict[str, Any]:
        # pickled for the disk cache (agentgym_r1.envs.alfworld.compiled) as compiled, the static command texts as
        # one string (PackedTexts: a string object per operator made a read slower); what play fills comes later
        return {
            **self.__dict__,
            "commands": PackedTexts.of(self.commands),
            "initial": None,
            "_ops": [None] * len(self._ops),
        }

    def _check(self) -> None:
        """Parse every rule, query, template and feedback now: an unsupported game fails before its first step, and
        no step parses (TextWorld's tatsu parsers are shared, not thread-safe)."""
        self.grammar.check()
        for action in self.game.logic.actions.values():
            self.grammar.prepare(action.template)
            self.grammar.prepare(action.feedback_rule)
        self.grammar.prepare("#intro#")
        for op in self.task.operators:
            name = op.name.split(" ", 1)[0]
            if name not in self.parameters or name not in self.game.logic.actions:
                raise UnsupportedGameError(f"operator {op.name!r}, whose action {name!r} the grammar lacks")

    def _bind(self, i: int) -> tuple[str, dict[Any, Any], dict[str, Any]]:
        """The operator's action name, mapping and variables, as ``PddlState.all_applicable_actions`` and
        ``_gather_infos`` build them: placeholders from the schema's parameters, variables from the operator's name."""
        from textworld.logic import Placeholder, Variable

        name, *args = self.task.names[i].split()
        mapping = {
            Placeholder(p.strip("?"), kind): Variable(arg, kind)
            for (p, kind), arg in zip(self.parameters[name], args, strict=False)
        }
        return name, mapping, {ph.name: self.game.entity_infos[var.name] for ph, var in mapping.items()}

    def _static_commands(self) -> list[str | None]:
        """Every operator's command text whose derivation reads only static facts, derived now on the initial facts
        (a first step in a new place then derives nothing)."""
        texts: list[str | None] = []
        for i, op in enumerate(self.task.operators):
            template = self.game.logic.actions[op.name.split(" ", 1)[0]].template
            if self.grammar.is_static(template):
                _, mapping, variables = self._bind(i)
                text = self.grammar.derive(template, self.game.pristine, variables, mapping).format(**self.names)
                texts.append(text)
            else:
                texts.append(None)
        return texts

    def operator(self, i: int) -> OperatorText:
        found = self._ops[i]
        if found is None:
            op = self.task.operators[i]
            name, mapping, variables = self._bind(i)
            action = self.game.logic.actions[name]
            facts = [
                atom_fact(self.task.value_names[var][value], self.game.pristine.name2type)
                for var, value, _ in op.effects
            ]
            found = self._ops[i] = OperatorText(
                op.name,
                mapping,
                variables,
                action.template,
                action.feedback_rule,
                tuple((fact.negate(), fact) for fact in facts),
            )
        return found

    def command(self, i: int, facts: Any) -> str:
        """``_gather_infos``: the operator's template derived with its mapping, then formatted with entity names."""
        text = self.commands[i]
        if text is None:
            op = self.operator(i)
            text = self.grammar.derive(op.template, facts, op.variables, op.mapping).format(**self.names)
        return text

    def feedback(self, i: int, facts: Any) -> str:
        op = self.operator(i)
        if op.feedback is not None:
            return op.feedback
        text = self.grammar.derive(op.feedback_rule, facts, op.variables, op.mapping)
        if self.grammar.is_static(op.feedback_rule):
            op.feedback = text
        return text


def machine(game: CompiledGame) -> FastGame:
    """The game's :class:`FastGame`, compiled on first use and kept on the compiled game; a game it cannot play
    raises :class:`UnsupportedGameError` naming the file and the feature."""
    if game.machine is None:
        with COMPILE_LOCK:
            try:
                if game.machine is None:
                    game.machine = FastGame(game)
            except UnsupportedGameError as e:
                raise UnsupportedGameError(e.feature, game.path) from e
    return game.machine


class FastEngine:
    """Plays compiled games like :class:`~agentgym_r1.envs.alfworld.engine.Engine`, with the same text."""

    def __init__(self, store: GameStore | None = None) -> None:
        import_textworld()
        self.store = store  # compiled games on disk (agentgym_r1.envs.alfworld.compiled); None: this process only
        self.game: CompiledGame | None = None
        self.state: Any = None
        self._facts: Any = None
        self._sas: SasState | None = None
        self._first: dict[str, int] = {}  # command -> the first applicable operator with that text
        self._played: list[int] = []

    def compile(self, path: str) -> CompiledGame:
        # with a store, the machine is built before the game is written; a library copy is borrowed to translate
        game = compile_game(path, None, self.store, machine if self.store is not None else None)
        machine(game)  # a game the in-process cache got from the stock engine has none yet
        return game

    def reset(self, game: CompiledGame) -> Any:
        """``PddlEnv.reset``: the intro and the initial infos, derived on the game's first reset and reused."""
        from textworld.core import GameState

        fast = machine(game)
        self.game, self._played = game, []
        self._facts = game.copy_facts()
        self._sas = fast.task.initial.copy() if fast.task.initial is not None else None
        if fast.initial is None:
            state = GameState()
            state.feedback = fast.grammar.derive("#intro#", self._facts, {}, {})
            state.raw = state.feedback
            first = self._gather(state)
            fast.initial = (state, first)
        state, self._first = fast.initial[0], dict(fast.initial[1])
        self.state = GameState({k: list(v) if isinstance(v, list) else v for k, v in state.items()})
        return self.state

    def step(self, command: str) -> Any:
        """``PddlEnv.step``: the first applicable operator whose text is ``command``, or "Nothing happens."."""
        from textworld.core import GameState

        assert self.game is not None and self._sas is not None, "reset() first"
        fast = machine(self.game)
        command = command.strip()
        state = GameState()
        state.last_command = command
        op = self._first.get(command)
        if op is None:
            state.feedback = NOTHING_HAPPENS
            state.raw = state.feedback
            prev = self.state
            for key in ("command_templates", "admissible_commands", "_valid_commands"):
                state[key] = list(prev[key])
            state["won"], state["lost"] = prev["won"], prev["lost"]
        else:
            for negation, fact in fast.operator(op).changes:  # PddlState.apply
                self._facts.remove_fact(negation)
                self._facts.add_fact(fact)
            self._sas.apply(op)
            self._played.append(op)
            state.feedback = fast.feedback(op, self._facts)
            state.raw = state.feedback
            self._first = self._gather(state)
        state["score"] = 1 if state["won"] else 0
        state["done"] = state["won"] or state["lost"]
        self.state = state
        return state

    def _gather(self, state: Any) -> dict[str, int]:
        """``PddlEnv._gather_infos``' keys that matter; returns the command -> first operator map for the next step."""
        fast = machine(self.game)
        assert self._sas is not None
        state["command_templates"] = list(fast.templates)
        state["won"] = self._sas.goal()
        state["lost"] = False
        state["last_action"] = None
        seen: set[str] = set()
        commands: list[str] = []
        first: dict[str, int] = {}
        for op in self._sas.applicable():
            name = fast.task.names[op]
            if name in seen:  # all_applicable_actions keeps the first operator of a name
                continue
            seen.add(name)
            text = fast.command(op, self._facts)
            commands.append(text)
            first.setdefault(text, op)  # PddlEnv.step takes _valid_commands.index(command): the first
        state["_valid_commands"] = commands
        state["admissible_commands"] = sorted(set(commands))
        return first

    def replan(self) -> list[str]:
        """fast-downward's plan from the current state: a pooled library, loaded with the game and this episode's
        operators replayed on it (the state the stock engine would have), then ``PddlState.replan``."""
        assert self.game is not None
        lib = take_lib()
        try:
            state = self.game.fresh_state(lib)
            for op in self._played:
                lib.apply_operator(op, None)
            return list(state.replan(self.game.entity_infos))
        finally:
            give_lib(lib)

    def close(self) -> None:
        self.game = self.state = self._facts = self._sas = None
        self._first, self._played = {}, []


def make_engine(name: str, store: GameStore | None = None) -> Any:
    """A new engine of kind ``name``: ``"fast"`` (:class:`~agentgym_r1.envs.alfworld.fast.FastEngine`) or
    ``"textworld"`` (:class:`~agentgym_r1.envs.alfworld.engine.Engine`), reading and writing compiled games in
    ``store`` when given. It lives here, above the engine module (which this one imports), so that the engine need
    not import this module back."""
    if check_engine(name) == "textworld":
        return Engine(store)
    return FastEngine(store)
