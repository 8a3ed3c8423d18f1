"""The real ALFWorld text engine: TextWorld's PDDL environment (fast-downward underneath), with per-game caches.

ALFWorld plays ``game.tw-pddl`` files through :class:`textworld.envs.pddl.PddlEnv`, with alfworld's demangler
turning PDDL ids (``Desk_bar__minus_00_dot_57...``) into names (``desk 1``). Loading a game costs two runs of
fast-downward's PDDL-to-SAS translator, and stock ``PddlEnv.reset`` runs them again on every reset. This module
compiles each game once (:func:`compile_game`, an LRU cache shared by every env in the process) and resets from a
copy of the compiled initial state, which is what a fresh translation would give.

Each :class:`Engine` owns one private copy of fast-downward's shared library (``PddlEnv`` loads a copy per
instance, fast-downward keeps the current task in globals) and reuses it for every game; :meth:`Engine.close` hands
it back to a pool for the next engine.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import sys
import threading
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym_r1.envs.alfworld.compiled import FactTable, GameStore, file_digest, pack, unpack
from agentgym_r1.error import ConfigError, DataFormatError, DataNotFoundError, require

log = logging.getLogger(__name__)
FEATURE = "AgentR1/ALFWorld-v0"
ENGINES = ("fast", "textworld")  # agentgym_r1.envs.alfworld.fast.FastEngine, and Engine below (stock PddlEnv)
COMPILED_CACHE_SIZE = 32  # about 3 MiB each for a real ALFWorld room
_LOCK = threading.RLock()
COMPILE_LOCK = _LOCK  # held while TextWorld parses (tatsu parsers are shared objects) or translates a game
# PddlState's fields that hold fast-downward's translation (PddlState.__init__): read only to load fast-downward's
# library (the stock engine, the planner) and to build the fast engine's machine, never to play on the fast engine
TRANSLATION = ("task", "_actions", "sas", "sas_replan")


def import_textworld() -> Any:
    """The ``textworld`` PDDL modules, or :class:`DependencyNotInstalled` naming the ``alfworld`` extra."""
    require("textworld", "alfworld", FEATURE)
    require("fast_downward", "alfworld", FEATURE + " (fast-downward-textworld, TextWorld's PDDL planner)")
    require("alfworld", "alfworld", FEATURE)
    from textworld.envs.pddl import pddl as tw_pddl

    return tw_pddl


@dataclass
class CompiledGame:
    """One game, parsed and translated once: the logic, the pristine initial state and the entity names."""

    path: str
    data: dict[str, Any]
    logic: Any
    pristine: Any
    entity_infos: dict[str, Any]
    names: frozenset[str] = field(default_factory=frozenset)
    initial: tuple[Any, dict[int, Any]] | None = None  # the engine's state right after reset, and its operators
    machine: Any = None  # the fast engine's compiled form (agentgym_r1.envs.alfworld.fast.FastGame), made on demand

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for the disk cache (agentgym_r1.envs.alfworld.compiled) as compiled, before any reset, with the
        # initial state's fields apart from its translation (half of an entry's bytes, most of its objects), which is
        # pickled on its own and unpickled on first access (see Translation).
        fields = vars(self.pristine)
        translation = fields.get("_translation")  # a stored game stored again keeps its translation's bytes
        if translation is None:
            translation = Translation.of({name: getattr(self.pristine, name) for name in TRANSLATION})
        facts = {k: v for k, v in fields.items() if k not in TRANSLATION and k != "_translation"}
        facts["_facts"] = FactTable(facts["_facts"])  # rebuilt as the defaultdict it was
        return {**self.__dict__, "initial": None, "pristine": facts, "translation": translation}

    def __setstate__(self, state: dict[str, Any]) -> None:
        facts, translation = state.pop("pristine"), state.pop("translation")
        pristine = object.__new__(_stored_state_class())
        pristine.__dict__.update(facts, _translation=translation)
        self.__dict__.update(state, pristine=pristine)

    @property
    def walkthrough(self) -> list[str] | None:
        plan = self.data.get("walkthrough")
        return list(plan) if plan else None

    def copy_facts(self) -> Any:
        """A copy of the initial ``PddlState`` bound to no library: its own facts, the translation shared."""
        src = self.pristine
        state = copy.copy(src)  # shares the translation (task, SAS text), copies the facts as State.copy does
        state._facts = defaultdict(set, {k: set(v) for k, v in src._facts.items()})
        state._vars_by_name = dict(src._vars_by_name)
        state._vars_by_type = defaultdict(set, {k: set(v) for k, v in src._vars_by_type.items()})
        state._var_counts = Counter(src._var_counts)
        return state

    def fresh_state(self, lib: Any) -> Any:
        """A copy of the initial state bound to ``lib``; fast-downward's C++ state is reloaded from the SAS text."""
        state = self.copy_facts()
        state.downward_lib = lib
        lib.load_sas(state.sas.encode("utf-8"))
        lib.load_sas_replan(state.sas_replan.encode("utf-8"))
        return state


class Translation:
    """fast-downward's translation of a stored game (the :data:`TRANSLATION` fields of its initial ``PddlState``),
    kept as the bytes of their own pickle and unpickled on first need.

    Safe to defer: the bytes are part of the entry's payload, so its checksum was checked when the entry was read;
    they unpickle to the objects that were stored (the planner and the stock engine play a stored game as a fresh
    compilation, tested); and nothing outside them refers to the objects inside (fast-downward's task, actions and
    SAS text: the fast engine keeps its actions' parameters as plain pairs), so pickling them apart loses no
    shared identity."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob
        self._fields: dict[str, Any] | None = None

    @classmethod
    def of(cls, fields: dict[str, Any]) -> Translation:
        return cls(pack(fields))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Translation, (self.blob,))

    def fields(self) -> dict[str, Any]:
        if self._fields is None:
            with _LOCK:  # once: every copy of the state shares the same task and text, as PddlState copies do
                if self._fields is None:
                    self._fields = unpack(self.blob)
        return self._fields


@functools.lru_cache(maxsize=1)
def _stored_state_class() -> type:
    from textworld.envs.pddl.logic import PddlState

    class StoredPddlState(PddlState):
        """A stored game's initial ``PddlState`` (and its copies): the facts as stored, the :data:`TRANSLATION`
        fields read from its :class:`Translation` on first access, then kept on the instance."""

        def __getattr__(self, name: str) -> Any:
            # Python calls __getattr__ only when the attribute is not found otherwise: the translation until loaded
            translation = self.__dict__.get("_translation")
            if name in TRANSLATION and translation is not None:
                fields = translation.fields()
                self.__dict__.update(fields)
                return fields[name]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    return StoredPddlState


def read_bytes(path: str) -> bytes:
    """The bytes of a game file, or :class:`DataNotFoundError`."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise DataNotFoundError(f"ALFWorld game file {path!r} does not exist or cannot be read ({e})") from e


def read_game(path: str, raw: bytes | None = None) -> dict[str, Any]:
    """The JSON of a ``game.tw-pddl`` file (its bytes ``raw`` when already read), checked for the keys the engine
    needs."""
    if raw is None:
        if not os.path.isfile(path):
            raise DataNotFoundError(f"ALFWorld game file {path!r} does not exist")
        raw = read_bytes(path)
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataFormatError(
            f"ALFWorld game file {path!r} is not valid JSON ({e}); re-download it with "
            "`alfworld-download` or regenerate it"
        ) from e
    missing = [
        k
        for k in ("pddl_domain", "grammar", "pddl_problem")
        if not isinstance(data, dict) or not isinstance(data.get(k), str)
    ]
    if missing:
        raise DataFormatError(
            f"ALFWorld game file {path!r} lacks the string key(s) {missing}; a game.tw-pddl "
            "holds pddl_domain, grammar and pddl_problem"
        )
    return data


def _translate(lib: Any, path: str, data: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """Parse the grammar and translate the problem with TextWorld; errors name the file."""
    from alfworld.agents.utils.misc import Demangler
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.generator.game import EntityInfo

    argv = sys.argv[:]
    try:
        logic = pddl_logic.GameLogic(domain=data["pddl_domain"], grammar=data["grammar"])
        state = pddl_logic.PddlState(lib, data["pddl_problem"], logic)
    except Exception as e:  # tatsu, fast-downward's translator and KeyErrors from bad PDDL all land here
        raise DataFormatError(
            f"ALFWorld game file {path!r} could not be loaded by TextWorld: {type(e).__name__}: {str(e)[:300]}"
        ) from e
    finally:
        sys.argv[:] = argv  # fast-downward's translator overwrites sys.argv
    infos = {v.name: EntityInfo(v.name, v.type) for fact in state.facts for v in fact.arguments}
    demangler = Demangler(game_infos=infos, shuffle=False)
    for info in infos.values():
        info.definite, info.indefinite = "the", "a"
        info.name = demangler.demangle_alfred_name(info.id)
    return logic, state, infos


_COMPILED: OrderedDict[tuple[str, float, int], CompiledGame] = OrderedDict()


def compile_data(path: str, data: dict[str, Any], lib: Any) -> CompiledGame:
    """Compile a game's JSON (``path`` only names it in errors and in ``info``); not cached."""
    with _LOCK:
        logic, state, infos = _translate(lib, path, data)
    state.downward_lib = None  # fresh copies are bound to the engine that plays them
    return CompiledGame(path, data, logic, state, infos, frozenset(info.name for info in infos.values()))


def _key(path: str) -> tuple[str, float, int]:
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataNotFoundError(f"ALFWorld game file {path!r} does not exist") from e
    return (path, st.st_mtime, st.st_size)


def remember(game: CompiledGame) -> None:
    """Put a compiled game in the cache under its (written) file."""
    key = _key(game.path)
    with _LOCK:
        _COMPILED[key] = game
        _COMPILED.move_to_end(key)
        while len(_COMPILED) > COMPILED_CACHE_SIZE:
            _COMPILED.popitem(last=False)


def cached_game(path: str) -> CompiledGame | None:
    """The compiled game at ``path`` when the cache holds it (and the file has not changed since), else ``None``."""
    key = _key(os.path.abspath(path))
    with _LOCK:
        game = _COMPILED.get(key)
        if game is not None:
            _COMPILED.move_to_end(key)
        return game


def clear_compiled() -> None:
    """Empty the in-process cache (benchmarks and tests of the disk cache start from it)."""
    with _LOCK:
        _COMPILED.clear()


def compile_game(
    path: str, lib: Any = None, store: GameStore | None = None, finish: Callable[[CompiledGame], Any] | None = None
) -> CompiledGame:
    """The compiled game at ``path``: from the in-process cache (by path, size and mtime; at most
    ``COMPILED_CACHE_SIZE`` games), else from ``store`` on disk, else compiled now with ``lib`` (a pooled library
    copy when ``None``) and written to ``store``. ``finish`` (the fast engine's machine) is run on a game compiled
    now, or read from the store without it, before it is written."""
    path = os.path.abspath(path)
    game = cached_game(path)
    if game is not None:
        return game
    raw = read_bytes(path)
    game = _compile_now(path, raw, lib, finish) if store is None else _stored(path, raw, lib, store, finish)
    remember(game)
    return game


def _stored(path: str, raw: bytes, lib: Any, store: GameStore, finish: Any) -> CompiledGame:
    """The game from ``store``, or compiled now and written there, once across processes: on a miss the entry's lock
    is taken and the entry read again, since another process may have been compiling it."""
    digest = file_digest(raw)
    game = store.load(path, digest, CompiledGame)
    if game is not None and (finish is None or game.machine is not None):
        return game
    lock = None
    try:
        lock = store.lock(digest)
        lock.acquire()
    except (OSError, TimeoutError) as e:  # filelock.Timeout is a TimeoutError: a holder stuck past LOCK_TIMEOUT
        log.warning("no lock on the compiled game of %s (%s); compiling it without", path, e)
        lock = None
    try:
        if lock is not None:
            game = store.load(path, digest, CompiledGame)
            if game is not None and (finish is None or game.machine is not None):
                return game
        game = _compile_now(path, raw, lib, finish, game)  # a stored translation is finished, not redone
        store.stats["compiled"] += 1
        store.save(game, digest)  # under the lock: the process waiting on it reads this entry
        return game
    finally:
        if lock is not None:
            lock.release()


def _compile_now(path: str, raw: bytes, lib: Any, finish: Any, translated: CompiledGame | None = None) -> CompiledGame:
    """Translate the game (unless ``translated`` is a stored translation without the machine), then ``finish`` it."""
    game = translated
    if game is None:
        data = read_game(path, raw)
        borrowed = take_lib() if lib is None else None
        try:
            game = compile_data(path, data, borrowed or lib)
        finally:
            if borrowed is not None:
                give_lib(borrowed)
    if finish is not None:
        finish(game)
    return game


@functools.lru_cache(maxsize=1)
def _engine_class() -> type:
    tw_pddl = import_textworld()
    import textworld
    from textworld.core import GameState

    class CachedPddlEnv(tw_pddl.PddlEnv):
        """TextWorld's ``PddlEnv`` that loads a :class:`CompiledGame` and resets from its pristine state."""

        def __init__(self, infos: Any, lib: Any) -> None:
            textworld.Environment.__init__(self, infos)  # PddlEnv.__init__ minus loading a new library copy
            self.downward_lib = lib

        def load_compiled(self, game: CompiledGame) -> None:
            self._game = game
            self._game_file = game.path
            self._game_data = game.data
            self.walkthrough = game.data.get("walkthrough")
            self._logic = game.logic
            self._entity_infos = game.entity_infos
            self._pddl_state = None

        def reset(self) -> GameState:
            # PddlEnv.reset, with the translation replaced by a copy of the compiled initial state. The intro text
            # and the initial infos are a pure function of the game: derived on its first reset, then reused.
            game = self._game
            self._pddl_state = game.fresh_state(self.downward_lib)
            self.prev_state = None
            self._last_action = None
            self._moves = 0
            if game.initial is None:
                self.state = GameState()
                context = {
                    "state": self._pddl_state,
                    "facts": list(self._pddl_state.facts),
                    "variables": {},
                    "mapping": {},
                    "entity_infos": self._entity_infos,
                }
                self.state.feedback = self._logic.grammar.derive("#intro#", context)
                self.state.raw = self.state.feedback
                self._gather_infos()
                game.initial = (GameState(self.state), dict(self._pddl_state._operators))
            state, operators = game.initial
            self.state = GameState({k: list(v) if isinstance(v, list) else v for k, v in state.items()})
            self.state["_entity_infos"] = dict(self._entity_infos)
            self._pddl_state._operators = dict(operators)
            return self.state

    return CachedPddlEnv


_LIBS: list[Any] = []  # loaded copies of fast-downward's library that no engine uses now


def take_lib() -> Any:
    """A loaded copy of fast-downward's library, from the pool (or loaded now); :func:`give_lib` hands it back."""
    import fast_downward

    with _LOCK:
        return _LIBS.pop() if _LIBS else fast_downward.load_lib()


def give_lib(lib: Any) -> None:
    with _LOCK:
        _LIBS.append(lib)


class Engine:
    """One TextWorld PDDL environment with its own copy of fast-downward, reused across games until closed.

    :meth:`close` hands the library copy back to a process-wide pool that the next engine takes it from, instead of
    unloading it: ``dlclose`` on fast-downward (``fast_downward.close_lib``) crashed the next ``load_lib`` in this
    project's tests. The number of copies is the largest number of engines open at once; nothing grows with resets.
    """

    def __init__(self, store: GameStore | None = None) -> None:
        import textworld

        self.store = store  # compiled games on disk (agentgym_r1.envs.alfworld.compiled); None: this process only
        self._env = _engine_class()(textworld.EnvInfos(won=True, admissible_commands=True), take_lib())
        self.game: CompiledGame | None = None
        self.state: Any = None

    @property
    def lib(self) -> Any:
        return self._env.downward_lib

    def compile(self, path: str) -> CompiledGame:
        return compile_game(path, self.lib, self.store)

    def reset(self, game: CompiledGame) -> Any:
        """Start ``game`` from its initial state; returns TextWorld's ``GameState``."""
        self._env.load_compiled(game)
        self.game = game
        self.state = self._env.reset()
        return self.state

    def step(self, command: str) -> Any:
        self.state, _, _ = self._env.step(command)
        return self.state

    def replan(self) -> list[str]:
        """fast-downward's plan from the current state (ALFWorld's planner expert); ``[]`` when none is found."""
        assert self.game is not None and self._env._pddl_state is not None
        return list(self._env._pddl_state.replan(self.game.entity_infos))

    def close(self) -> None:
        """Drop the game state and give the library copy back to the pool. Safe to call twice."""
        env, self._env = getattr(self, "_env", None), None
        self.game = self.state = None
        if env is not None and env.downward_lib is not None:
            lib, env.downward_lib, env._pddl_state, env.state, env.prev_state = env.downward_lib, None, None, None, None
            give_lib(lib)


def check_engine(name: str) -> str:
    """``name`` when it is one of :data:`ENGINES`, else :class:`ConfigError` naming them."""
    if name not in ENGINES:
        raise ConfigError(
            f"unknown ALFWorld engine {name!r}; choose one of {list(ENGINES)} ('fast': the compiled "
            "engine, same text; 'textworld': TextWorld's own PddlEnv)"
        )
    return name
