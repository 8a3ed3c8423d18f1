"""TextWorld's grammar derivation, with every template and query parsed once per game.

TextWorld writes ALFWorld's text with a context-sensitive grammar (``textworld/envs/pddl/textgen/__init__.py``):
``ContextSensitiveGrammar.derive`` parses its start string with tatsu, then pops symbols off a stack. A nonterminal
is replaced by the right-hand side of the *first* of its rules whose condition (a conjunctive query,
``Rule.parse_conjunctive_query``, parsed with tatsu again) has an assignment in the state; ``{expr | query}`` yields
``expr`` once per assignment of the query (``query``); ``[...]`` joins those with ``#list_separator#`` and
``#list_last_separator#`` (``display_list``); ``{expr}`` is Python evaluated on the context's variables
(``EvalSymbol.derive``). There is no randomness: the first applicable rule always wins.

:class:`Grammar` runs the same algorithm on the same parsed symbols (textgen's own parser, once per string), asks
the same queries of the same ``textworld.logic.State.all_assignments``, and so writes the same text, without the
tatsu parses and context deep copies that cost the stock engine most of its step time. It also tells which
derivations are *static*: those whose queries only read predicates no operator changes (:meth:`Grammar.is_static`),
whose text is then a function of the action alone and is kept per action by the engine.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
from collections.abc import Iterator
from typing import Any

from agentgym_r1.envs.alfworld.sas import UnsupportedGameError

Node = tuple[Any, ...]  # ("t", text) | ("n", name) | ("c", expression node, given) | ("e", Expression) | ("l", c node)
Context = tuple[dict[str, Any], dict[Any, Any]]  # (variables: placeholder name -> EntityInfo, mapping)
_DUMMY = {"state": None, "facts": None, "variables": {}, "mapping": {}, "entity_infos": None}
_FORBIDDEN = frozenset(dir(builtins)) | {"self", "context"}  # names EvalSymbol.derive's eval would resolve itself
_ATTRIBUTES = frozenset({"id", "type", "name", "noun", "adj", "desc", "room_type", "definite", "indefinite"})


def _check_expression(text: str) -> None:
    """Only ``var``, ``var.attr``, string literals, ``+``, ``or`` and ``and``: a function of the variables."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise UnsupportedGameError(f"the grammar expression {{{text}}}, not Python ({e.msg})") from e
    for node in ast.walk(tree):
        ok = (
            isinstance(node, ast.Expression | ast.Load | ast.Add | ast.BoolOp | ast.Or | ast.And)
            or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add))
            or (isinstance(node, ast.Constant) and isinstance(node.value, str))
            or (isinstance(node, ast.Name) and node.id not in _FORBIDDEN)
            or (isinstance(node, ast.Attribute) and node.attr in _ATTRIBUTES)
        )
        if not ok:
            raise UnsupportedGameError(
                f"the grammar expression {{{text}}}, with a {type(node).__name__} (the fast "
                "engine evaluates variables, their name/definite/indefinite attributes, "
                "string literals, +, or, and)"
            )


@functools.lru_cache(maxsize=4096)
def _code(text: str) -> Any:
    """The code of a grammar expression, compiled once per process (every ALFWorld game has the same grammar)."""
    return compile(text, "<alfworld grammar>", "eval")


class Expression:
    """A grammar expression ``{...}``, checked and compiled once; pickled as its text (code objects do not pickle),
    so a compiled game can be kept on disk (:mod:`~agentgym_r1.envs.alfworld.compiled`)."""

    __slots__ = ("code", "text")

    def __init__(self, text: str, checked: bool = False) -> None:
        if not checked:
            _check_expression(text)
        self.text = text
        self.code = _code(text)

    def __reduce__(self) -> tuple[type, tuple[str, bool]]:
        return (Expression, (self.text, True))  # checked when the game was compiled; the entry's checksum holds


class Grammar:
    """One game's grammar (a ``textworld.envs.pddl.logic.GameLogic``'s), derived as textgen derives it."""

    def __init__(self, logic: Any, entity_infos: dict[str, Any], dynamic: frozenset[str]) -> None:
        self.logic = logic
        self.entity_infos = entity_infos
        self.dynamic = dynamic
        self._rules: dict[str, list[tuple[Any, tuple[Node, ...]]]] = {}
        self._parsed: dict[str, tuple[Node, ...]] = {}
        self._queries: dict[str, Any] = {}
        self._static: dict[str, bool] = {}
        self._from_logic()

    def _from_logic(self) -> None:
        self.types = self.logic.types  # the TypeHierarchy PddlState filled from the translated task
        # textgen keeps the rules in ContextSensitiveGrammar._rules (name -> [ProductionRule]) with no public accessor
        self._production = self.logic.grammar._rules
        self._bound: dict[int, list[tuple[str, tuple[Any, ...], frozenset[tuple[str, ...]]]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for the disk cache (agentgym_r1.envs.alfworld.compiled) with the parsed rules, texts and queries, each
        # rule name's and each table's as a Shared part: a process reading many games parses and unpickles each once.
        # _bound is keyed by id(rule), which pickle does not keep: an unpickled grammar starts it empty; the types and
        # productions are the logic's (pickled with it), taken from it again on load.
        from agentgym_r1.envs.alfworld.compiled import Shared

        state = {k: v for k, v in self.__dict__.items() if k not in ("types", "_production", "_bound")}
        state["_rules"] = {name: Shared(rules) for name, rules in self._rules.items()}
        return {**state, **{k: Shared(state[k]) for k in ("_parsed", "_queries", "_static")}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for k in ("_parsed", "_queries", "_static"):  # a shared table is copied: parses after a load add to it
            self.__dict__[k] = dict(state[k])
        self._from_logic()

    # -- parsing, once per string --------------------------------------------------------------------------------
    def parse(self, text: str) -> tuple[Node, ...]:
        nodes = self._parsed.get(text)
        if nodes is None:
            from textworld.envs.pddl.textgen import ContextSensitiveGrammar, NonterminalSymbol

            # textgen's parser through its public API: a one-rule grammar, replaced once
            one = ContextSensitiveGrammar.parse(json.dumps({"start": [{"rhs": text}]}))
            nodes = self._parsed[text] = tuple(self._node(s) for s in one.replace(NonterminalSymbol("start", _DUMMY)))
        return nodes

    def _node(self, symbol: Any) -> Node:
        from textworld.envs.pddl import textgen

        if isinstance(symbol, textgen.TerminalSymbol):
            return ("t", str(symbol))
        if isinstance(symbol, textgen.NonterminalSymbol):
            return ("n", str(symbol))
        if isinstance(symbol, textgen.ConditionalSymbol):
            return ("c", self._node(symbol.expression), symbol.given or None)
        if isinstance(symbol, textgen.EvalSymbol):
            return ("e", Expression(symbol.expression))
        if isinstance(symbol, textgen.ListSymbol):
            return ("l", self._node(symbol.symbol))
        raise UnsupportedGameError(f"the grammar symbol {type(symbol).__name__} (not one of textgen's five)")

    def query(self, text: str) -> Any:
        rule = self._queries.get(text)
        if rule is None:
            from textworld.logic import Rule

            rule = self._queries[text] = Rule.parse_conjunctive_query(text)
        return rule

    def rules(self, name: str) -> list[tuple[Any, tuple[Node, ...]]]:
        found = self._rules.get(name)
        if found is None:
            found = self._rules[name] = [
                (self.query(r.condition) if r.condition else None, tuple(self._node(s) for s in r.rhs))
                for r in self._production.get(name, ())
            ]
        return found

    def check(self) -> None:
        """Parse every rule and query now: an expression the fast engine cannot evaluate raises
        :class:`UnsupportedGameError`."""
        for name in list(self._production):
            for _, rhs in self.rules(name):
                self._parse_queries(rhs)

    def prepare(self, text: str) -> None:
        """Parse ``text`` and its queries now (and tell whether it is static)."""
        self._parse_queries(self.parse(text))
        self.is_static(text)

    def _parse_queries(self, nodes: tuple[Node, ...]) -> None:
        for node in nodes:
            if node[0] == "c":
                if node[2]:
                    self.query(node[2])
                self._parse_queries((node[1],))
            elif node[0] == "l":
                self._parse_queries((node[1],))

    # -- static analysis -----------------------------------------------------------------------------------------
    def is_static(self, text: str) -> bool:
        """Whether deriving ``text`` reads only facts no operator changes (so its text depends on the mapping only)."""
        found = self._static.get(text)
        if found is None:
            seen: set[str] = set()
            found = self._static[text] = all(self._node_static(n, seen) for n in self.parse(text))
        return found

    def _node_static(self, node: Node, seen: set[str]) -> bool:
        kind = node[0]
        if kind == "n":
            name = node[1]
            if name in seen:
                return True
            seen.add(name)
            return all(
                (cond is None or self._query_static(cond)) and all(self._node_static(n, seen) for n in rhs)
                for cond, rhs in self.rules(name)
            )
        if kind == "c":
            return (node[2] is None or self._query_static(self.query(node[2]))) and self._node_static(node[1], seen)
        if kind == "l":
            return self._node_static(node[1], seen) and all(
                self._node_static(("n", n), seen) for n in ("list_empty", "list_separator", "list_last_separator")
            )
        return True

    def _query_static(self, rule: Any) -> bool:
        return not any(p.name in self.dynamic for p in rule.preconditions)

    # -- derivation ----------------------------------------------------------------------------------------------
    def derive(self, text: str, state: Any, variables: dict[str, Any], mapping: dict[Any, Any]) -> str:
        """``ContextSensitiveGrammar.derive(text, context)`` for the context TextWorld's ``PddlEnv`` builds."""
        out: list[str] = []
        stack: list[tuple[Node, dict[str, Any], dict[Any, Any]]] = [
            (n, variables, mapping) for n in reversed(self.parse(text))
        ]
        while stack:
            node, var, mp = stack.pop()
            kind = node[0]
            if kind == "t":
                out.append(node[1])
            elif kind == "n":
                stack.extend((n, var, mp) for n in reversed(self._choose(node[1], state, mp)))
            elif kind == "c":
                stack.extend((node[1], v, m) for v, m in reversed(self._contexts(node, state, var, mp)))
            elif kind == "e":
                out.append(str(eval(node[1].code, {"__builtins__": {}}, var)))  # checked by _check_expression
            else:
                items = [(node[1][1], v, m) for v, m in self._contexts(node[1], state, var, mp)]
                stack.extend(reversed(_display_list(items, var, mp)))
        return "".join(out)

    def _choose(self, name: str, state: Any, mapping: dict[Any, Any]) -> tuple[Node, ...]:
        rules = self.rules(name)
        if not rules:
            from textworld.envs.pddl.textgen import CSGUnknownSymbolError, NonterminalSymbol

            raise CSGUnknownSymbolError(NonterminalSymbol(name))
        for condition, rhs in rules:
            if condition is None or _any(self._assignments(condition, state, mapping)):
                return rhs
        raise IndexError(f"no rule of #{name}# applies (TextWorld fails the same way: list index out of range)")

    def _contexts(self, node: Node, state: Any, variables: dict[str, Any], mapping: dict[Any, Any]) -> list[Context]:
        if not node[2]:
            return [(variables, mapping)]
        out = []
        infos = self.entity_infos
        for found in self._assignments(self.query(node[2]), state, mapping):  # one dict, mutated as it goes: read now
            var = dict(variables)
            var.update({ph.name: infos[v.name] for ph, v in found.items()})
            mp = dict(mapping)
            mp.update(found)
            out.append((var, mp))
        return out

    def _assignments(self, rule: Any, state: Any, mapping: dict[Any, Any]) -> Iterator[dict[Any, Any]]:
        """``state.all_assignments(rule, mapping)``; when the mapping binds every placeholder of the query, its one
        possible answer without sorting the facts of each predicate.

        ``State._all_applicable_assignments`` (``textworld/logic/__init__.py``) walks the preconditions, and for each
        of the signatures ``multi_subtypes`` allows, the sorted facts that agree with the mapping. With every
        placeholder bound, at most one fact agrees per precondition (the one with the mapped variables, under its
        own signature), so there is one assignment, a copy of the mapping, exactly when each of those facts holds
        and has an allowed signature."""
        plan = self._bound_plan(rule, mapping)
        if plan is None:
            yield from state.all_assignments(rule, mapping)
            return
        from textworld.logic import Proposition, Signature

        for name, params, allowed in plan:
            args = [mapping[ph] for ph in params]
            types = tuple(v.type for v in args)
            if types not in allowed or Proposition(name, args) not in state.facts_with_signature(
                Signature(name, types)
            ):
                return
        yield dict(mapping)

    def _bound_plan(
        self, rule: Any, mapping: dict[Any, Any]
    ) -> list[tuple[str, tuple[Any, ...], frozenset[tuple[str, ...]]]] | None:
        if any(ph not in mapping for pred in rule.preconditions for ph in pred.parameters):
            return None
        plan = self._bound.get(id(rule))
        if plan is None:
            plan = self._bound[id(rule)] = [
                (
                    pred.name,
                    tuple(pred.parameters),
                    frozenset(
                        tuple(t.name for t in combo)
                        for combo in self.types.multi_subtypes([self.types.get(t) for t in pred.signature.types])
                    ),
                )
                for pred in rule.preconditions
            ]
        return plan


def _any(assignments: Iterator[Any]) -> bool:
    for _ in assignments:  # an assignment may be an empty dict: truth is "one exists", not its value
        return True
    return False


def _display_list(
    items: list[tuple[Node, dict[str, Any], dict[Any, Any]]], variables: dict[str, Any], mapping: dict[Any, Any]
) -> list[tuple[Node, dict[str, Any], dict[Any, Any]]]:
    """textgen's ``display_list``: nothing -> #list_empty#, one -> itself, else separators between."""
    if not items:
        return [(("n", "list_empty"), variables, mapping)]
    if len(items) == 1:
        return items
    sep, last = (("n", "list_separator"), variables, mapping), (("n", "list_last_separator"), variables, mapping)
    out = []
    for item in items[:-1]:
        out += [item, sep]
    out[-1] = last
    out.append(items[-1])
    return out
