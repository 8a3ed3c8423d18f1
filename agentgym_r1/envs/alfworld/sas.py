"""fast-downward's grounded task (the SAS text TextWorld's ``PddlState`` loads) as a Python state machine.

TextWorld's ``PddlState`` (``textworld/envs/pddl/logic/__init__.py``) keeps the game's state in a copy of
fast-downward's C++ library and asks it, at every step, for the applicable operators
(``get_applicable_operators``), to apply one (``apply_operator``) and whether the goal holds (``check_goal``).
:class:`SasTask` reads the same SAS text once per game and answers the same three questions in Python, sharing
everything but the state vector between the envs that play the game:

* **Applicable operators, in fast-downward's order.** ``get_applicable_operators`` (textworld's
  ``fast_downward`` fork, ``src/search/pddl_lib.cc``) runs fast-downward's successor generator. Its factory
  (``task_utils/successor_generator_factory.cc``) sorts every operator's preconditions by variable, stable-sorts the
  operators by those lists, and builds a decision tree whose traversal (immediate operators first, then one switch
  per variable in increasing order, forks in order) yields the applicable operators in that sorted order. The order
  matters: TextWorld applies the *first* operator whose command text equals the player's command, and several
  ALFWorld action schemas share a template (``take {o} from {r}``). :meth:`SasState.applicable` sorts by
  :attr:`SasTask.rank`, which is that order. Applicability is kept incrementally: each operator counts its unmet
  preconditions, and a step updates only the operators that watch a changed variable.
* **Applying an operator.** fast-downward's ``StateRegistry::get_successor_state`` sets each effect whose effect
  conditions hold in the predecessor, then evaluates the axioms (``AxiomEvaluator``): derived variables start from
  their default (initial-state) value and rules fire layer by layer to a fixpoint.
* **The goal** is the SAS goal facts, checked on the state with its derived variables.

Textworld's Python-side facts (what the grammar queries) change by *all* the effect atoms ``apply_operator``
reports, conditional or not (``PddlState.apply``): :attr:`SasTask.effects` keeps them per operator as
``(negation, fact)`` :class:`~textworld.logic.Proposition` pairs, parsed as ``Atom.get_fact`` parses them.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_r1.error import DataFormatError

NONE_OF_THOSE = "<none of those>"


class UnsupportedGameError(DataFormatError):
    """A game uses a feature the fast ALFWorld engine does not implement; play it with ``engine="textworld"``."""

    def __init__(self, feature: str, game: str | None = None) -> None:
        self.feature, self.game = feature, game
        where = f"ALFWorld game file {game!r}" if game else "this ALFWorld game"
        super().__init__(
            f"the fast engine cannot play {where}: it uses {feature}. Play it with "
            f'engine="textworld" (TextWorld\'s own engine)'
        )


@dataclass(slots=True)
class Operator:
    name: str
    preconditions: tuple[tuple[int, int], ...]  # sorted by variable, as fast-downward's successor generator reads them
    effects: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]  # (var, value, effect conditions)


@dataclass(slots=True)
class Axiom:
    layer: int
    conditions: tuple[tuple[int, int], ...]
    var: int
    value: int


class _Reader:
    """The SAS text, token by token on lines (the format is line-based)."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.i = 0

    def line(self) -> str:
        line = self.lines[self.i]
        self.i += 1
        return line

    def ints(self) -> list[int]:
        return [int(x) for x in self.line().split()]

    def int(self) -> int:
        return int(self.line())

    def magic(self, word: str) -> None:
        got = self.line()
        if got != word:
            raise DataFormatError(f"SAS text: expected {word!r} at line {self.i}, got {got[:60]!r}")

    def facts(self) -> tuple[tuple[int, int], ...]:
        return tuple((var, value) for var, value in (self.ints() for _ in range(self.int())))


@dataclass
class SasTask:
    """One game's grounded task: variables, initial state, goal, operators and axioms, read from fast-downward's
    SAS text (``translate/sas_tasks.py`` writes it, ``tasks/root_task.cc`` reads it)."""

    value_names: list[list[str]]
    layers: list[int]
    init: list[int]
    goal: tuple[tuple[int, int], ...]
    operators: list[Operator]
    axioms: list[Axiom]
    rank: array = field(default_factory=lambda: array("i"))  # each operator's position in fast-downward's order
    watch: Watchers | None = None
    derived: list[int] = field(default_factory=list)
    strata: list[list[Axiom]] = field(default_factory=list)
    initial: SasState | None = None

    @functools.cached_property
    def names(self) -> list[str]:
        """Each operator's name (a stored task's without decoding its operators)."""
        ops = self.operators
        return ops.names() if isinstance(ops, PackedOperators) else [op.name for op in ops]

    @classmethod
    def parse(cls, text: str) -> SasTask:
        r = _Reader(text)
        r.magic("begin_version")
        version = r.int()
        if version != 3:
            raise UnsupportedGameError(f"SAS version {version} (the fast engine reads version 3)")
        r.magic("end_version")
        r.magic("begin_metric")
        r.int()
        r.magic("end_metric")
        names, layers = [], []
        for _ in range(r.int()):
            r.magic("begin_variable")
            r.line()
            layers.append(r.int())
            names.append([r.line() for _ in range(r.int())])
            r.magic("end_variable")
        for _ in range(r.int()):  # mutex groups: invariants, not needed to play
            r.magic("begin_mutex_group")
            while r.line() != "end_mutex_group":
                pass
        r.magic("begin_state")
        init = [r.int() for _ in names]
        r.magic("end_state")
        r.magic("begin_goal")
        goal = r.facts()
        r.magic("end_goal")
        operators = [cls._operator(r) for _ in range(r.int())]
        axioms = []
        for _ in range(r.int()):
            r.magic("begin_rule")
            conditions = r.facts()
            var, _, value = r.ints()
            axioms.append(Axiom(layers[var], conditions, var, value))
            r.magic("end_rule")
        task = cls(names, layers, init, goal, operators, axioms)
        task._index()
        return task

    @staticmethod
    def _operator(r: _Reader) -> Operator:
        # ExplicitOperator(istream&) in fast-downward's root_task.cc: prevail conditions, then pre_post entries whose
        # "pre" value (when not -1) is one more precondition.
        r.magic("begin_operator")
        name = r.line().strip()
        pre = list(r.facts())
        effects = []
        for _ in range(r.int()):
            nums = r.ints()
            n = nums[0]
            conditions = tuple((nums[1 + 2 * k], nums[2 + 2 * k]) for k in range(n))
            var, before, after = nums[1 + 2 * n : 4 + 2 * n]
            if before != -1:
                pre.append((var, before))
            effects.append((var, after, conditions))
        r.int()  # cost
        r.magic("end_operator")
        return Operator(name, tuple(sorted(pre)), tuple(effects))

    def _index(self) -> None:
        order = sorted(range(len(self.operators)), key=lambda i: self.operators[i].preconditions)  # stable: by id
        self.rank = array("i", bytes(4 * len(order)))
        for position, op in enumerate(order):
            self.rank[op] = position
        self.watch = Watchers.of([len(values) for values in self.value_names], self.operators)
        for var, value, _ in (e for op in self.operators for e in op.effects):
            if self.value_names[var][value] == NONE_OF_THOSE:
                raise UnsupportedGameError("an operator effect to '<none of those>'")
        self.derived = [var for var, layer in enumerate(self.layers) if layer >= 0]
        self.strata = [[a for a in self.axioms if a.layer == layer] for layer in sorted({a.layer for a in self.axioms})]
        values = list(self.init)
        self.evaluate_axioms(values)
        unmet = [sum(values[var] != value for var, value in op.preconditions) for op in self.operators]
        self.initial = SasState(self, values, unmet, {i for i, n in enumerate(unmet) if n == 0})

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for the disk cache (agentgym_r1.envs.alfworld.compiled): the operators (thousands of objects, most
        # of a stored game's unpickling time) and the value names as packed columns, decoded one at a time on first
        # use (an episode touches a few dozen). Everything derived from them is kept as is: rank and the watch lists
        # are int arrays already (a list of ints pickles as an object per int above 256, and a read made them all).
        state = {k: v for k, v in self.__dict__.items() if k != "names"}  # names: a cached property
        return {
            **state,
            "operators": PackedOperators.of(self.operators),
            "value_names": PackedRows.of(self.value_names),
        }

    def evaluate_axioms(self, values: list[int]) -> None:
        """Derived variables from their defaults, then each layer's rules to a fixpoint (fast-downward's
        ``AxiomEvaluator::evaluate``; stratified, so a layer reads the final values of the layers below)."""
        for var in self.derived:
            values[var] = self.init[var]
        for rules in self.strata:
            changed = True
            while changed:
                changed = False
                for a in rules:
                    if values[a.var] != a.value and all(values[v] == x for v, x in a.conditions):
                        values[a.var] = a.value
                        changed = True


class _Packed(Sequence[Any]):
    """A list stored packed: each item decoded by ``_decode(i)`` on first access, then kept in ``_decoded``. Two
    threads decoding one item at once store equal items; nothing compares them by identity."""

    _decoded: list[Any]

    def _decode(self, i: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._decoded)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        item = self._decoded[i]
        return item if item is not None else self._decode(range(len(self))[i])  # a negative index counts from the end

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))


class PackedOperators(_Packed):
    """A stored task's operators: names in one string, preconditions and effects as one array of ints, each
    :class:`Operator` decoded on first access. It decodes to operators equal to the ones packed (tested), so the
    task plays as the one compiled; ``len``, indexing and iteration are a list's."""

    def __init__(self, names: str, ints: array, starts: array) -> None:
        self._names, self._ints, self._starts = names, ints, starts
        self._split: list[str] | None = None
        self._decoded: list[Operator | None] = [None] * (len(starts) - 1)

    @classmethod
    def of(cls, operators: Sequence[Operator]) -> PackedOperators:
        if isinstance(operators, PackedOperators):  # a stored task stored again: already packed
            return operators
        ints, starts = array("i"), array("i", [0])
        for op in operators:  # len(pre), pre pairs, len(effects), then var, value, len(conditions), condition pairs
            ints.append(len(op.preconditions))
            for pair in op.preconditions:
                ints.extend(pair)
            ints.append(len(op.effects))
            for var, value, conditions in op.effects:
                ints.extend((var, value, len(conditions)))
                for pair in conditions:
                    ints.extend(pair)
            starts.append(len(ints))
        assert all("\n" not in op.name for op in operators)  # SAS is line-based: a name is one line
        if not ints or max(ints) < 1 << 16:  # variables and values of a game fit 16 bits: half the bytes to read
            ints = array("H", ints)
        return cls("\n".join(op.name for op in operators), ints, starts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedOperators, (self._names, self._ints, self._starts))

    def names(self) -> list[str]:
        """Every operator's name, without decoding the operators."""
        if self._split is None:
            self._split = self._names.split("\n")
        return self._split

    def _decode(self, i: int) -> Operator:
        ints, k = self._ints, self._starts[i]
        end = k + 1 + 2 * ints[k]
        pre = tuple(zip(ints[k + 1 : end : 2], ints[k + 2 : end : 2], strict=True))
        effects = []
        k = end
        for _ in range(ints[end]):
            var, value, m = ints[k + 1 : k + 4]
            end = k + 4 + 2 * m
            effects.append((var, value, tuple(zip(ints[k + 4 : end : 2], ints[k + 5 : end : 2], strict=True))))
            k = end - 1
        op = self._decoded[i] = Operator(self.names()[i], pre, tuple(effects))
        return op


class PackedRows(_Packed):
    """A stored task's value names (one list of atom names per variable): each variable's as one string, split on
    first access; equal to the lists packed."""

    def __init__(self, rows: list[str]) -> None:
        self._rows = rows
        self._decoded: list[list[str] | None] = [None] * len(rows)

    @classmethod
    def of(cls, rows: Sequence[Sequence[str]]) -> PackedRows:
        if isinstance(rows, PackedRows):
            return rows
        assert all(name and "\n" not in name for row in rows for name in row)  # SAS: one non-empty line each
        return cls(["\n".join(row) for row in rows])

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedRows, (self._rows,))

    def _decode(self, i: int) -> list[str]:
        row = self._decoded[i] = self._rows[i].split("\n") if self._rows[i] else []
        return row


class PackedTexts(_Packed):
    """A list of strings or ``None``s stored as one string, the items' bounds and a flag per ``None``; each item cut
    out on first access. Equal to the list packed."""

    def __init__(self, text: str, starts: array, absent: bytes) -> None:
        self._text, self._starts, self._absent = text, starts, absent
        self._decoded: list[str | None] = [None] * len(absent)

    @classmethod
    def of(cls, items: Sequence[str | None]) -> PackedTexts:
        if isinstance(items, PackedTexts):
            return items
        starts = array("i", [0])
        for item in items:
            starts.append(starts[-1] + len(item or ""))
        return cls("".join(item or "" for item in items), starts, bytes(item is None for item in items))

    def __reduce__(self) -> tuple[Any, ...]:
        return (PackedTexts, (self._text, self._starts, self._absent))

    def _decode(self, i: int) -> str | None:
        if self._absent[i]:
            return None
        text = self._decoded[i] = self._text[self._starts[i] : self._starts[i + 1]]
        return text


class SasState:
    """One env's state in a :class:`SasTask`: the variable values and the applicable operators, kept incrementally."""

    __slots__ = ("open", "task", "unmet", "values")

    def __init__(self, task: SasTask, values: list[int], unmet: list[int], open_: set[int]) -> None:
        self.task, self.values, self.unmet, self.open = task, values, unmet, open_

    def copy(self) -> SasState:
        return SasState(self.task, list(self.values), list(self.unmet), set(self.open))

    def applicable(self) -> list[int]:
        """The applicable operators' ids, in fast-downward's successor-generator order."""
        return sorted(self.open, key=self.task.rank.__getitem__)

    def goal(self) -> bool:
        return all(self.values[var] == value for var, value in self.task.goal)

    def apply(self, op_id: int) -> None:
        task, values = self.task, self.values
        fired = [
            (var, value)
            for var, value, conditions in task.operators[op_id].effects
            if all(values[v] == x for v, x in conditions)
        ]  # effect conditions read the predecessor
        old: dict[int, int] = {}
        for var, value in fired:
            old.setdefault(var, values[var])
            values[var] = value
        if task.axioms:
            for var in task.derived:
                old.setdefault(var, values[var])
            task.evaluate_axioms(values)
        for var, before in old.items():
            if values[var] != before:
                self._watch(var, before, values[var])

    def _watch(self, var: int, old: int, new: int) -> None:
        watch, unmet, open_ = self.task.watch, self.unmet, self.open
        assert watch is not None
        for op in watch.ops(var, old):
            unmet[op] += 1
            open_.discard(op)
        for op in watch.ops(var, new):
            unmet[op] -= 1
            if unmet[op] == 0:
                open_.add(op)


class Watchers:
    """The operators whose preconditions read each (variable, value), in operator order: one int array of operator
    ids (``table``), cut into a row per (variable, value): ``row = first[var] + value``, its operators
    ``table[start[row]:start[row + 1]]``. Three arrays instead of a dict and lists per variable: a stored game reads
    them as three buffers, not thousands of objects."""

    __slots__ = ("first", "start", "table")

    def __init__(self, first: array, start: array, ops: array) -> None:
        self.first, self.start, self.table = first, start, ops

    @classmethod
    def of(cls, domains: Sequence[int], operators: Sequence[Operator]) -> Watchers:
        first = array("i", [0])
        for size in domains:
            first.append(first[-1] + size)
        rows: list[list[int]] = [[] for _ in range(first[-1])]
        for i, op in enumerate(operators):
            for var, value in op.preconditions:
                rows[first[var] + value].append(i)
        start, ops = array("i", [0]), array("i")
        for row in rows:
            ops.extend(row)
            start.append(len(ops))
        return cls(first[:-1], start, ops)

    def ops(self, var: int, value: int) -> array:
        row = self.first[var] + value
        return self.table[self.start[row] : self.start[row + 1]]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Watchers, (self.first, self.start, self.table))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Watchers):
            return NotImplemented
        return (self.first, self.start, self.table) == (other.first, other.start, other.table)

    def __hash__(self) -> int:
        return hash(bytes(self.table))


def split_atom(name: str) -> tuple[bool, str, list[str]]:
    """``"NegatedAtom opened(fridge_1)"`` -> ``(True, "opened", ["fridge_1"])``, as textworld's ``Atom.get_fact``
    splits it (``textworld/envs/pddl/logic/__init__.py``)."""
    atom_type, rest = name.split(" ", 1)
    predicate, args = rest.split("(", 1)
    return atom_type == "NegatedAtom", predicate, [a for a in args[:-1].split(", ") if a]


def atom_fact(name: str, name2type: dict[str, str]) -> Any:
    """The :class:`~textworld.logic.Proposition` ``Atom.get_fact`` makes of a SAS value name."""
    from textworld.logic import Proposition, Variable

    negated, predicate, args = split_atom(name)
    return Proposition(
        "not_" + predicate if negated else predicate,
        [Variable(a.upper() if a.lower() in ("i", "p") else a, name2type[a]) for a in args],
    )


def dynamic_predicates(task: SasTask) -> frozenset[str]:
    """Predicate names whose facts an operator can change (both polarities): the others are static."""
    names = set()
    for values in task.value_names:
        for name in values:
            if name != NONE_OF_THOSE:
                _, predicate, _ = split_atom(name)
                names.update((predicate, "not_" + predicate))
    return frozenset(names)
