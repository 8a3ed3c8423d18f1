"""Compiled ALFWorld games kept on disk, shared by every process of the machine, and compiled ahead in workers.

Compiling a game (fast-downward's translation, twice, then the fast engine's state machine) takes 0.3-1.3 s on a
quiet machine and several seconds under load; the in-process cache (:func:`~agentgym_r1.envs.alfworld.engine.
compile_game`) keeps 32 games and dies with the process. A :class:`GameStore` keeps every compiled game as a file,
so each game of a split is compiled once per machine, not once per process (env workers, Ray actors, each run):

* **Where.** ``<root>/<engine version>/<hh>/<sha256 of the game file>.game``. The root is the ``compile_cache``
  argument of the env, else ``$AGENTGYM_R1_COMPILE_CACHE``, else ``<cache>/alfworld/compiled`` where ``<cache>`` is
  ``$AGENTGYM_R1_CACHE`` or the user's cache directory (``platformdirs``: ``$XDG_CACHE_HOME/agentgym-r1``, else
  ``~/.cache/agentgym-r1`` on Linux). ``compile_cache=False`` (or the variable set to ``off``) turns it off. Clear it
  by deleting the directory; an engine version's entries are never read by another version.
* **Key.** The game file's bytes (its SHA-256; a game copied or linked elsewhere is the same entry) and
  :func:`engine_version`: a hash of this format's number, the Python version, the TextWorld, fast-downward, alfworld
  and TatSu versions and the source of the modules whose objects are stored or rebuild them (compiled, engine, fast,
  sas, textgen).
* **Trust.** An entry is a magic line, a JSON header (format, engine version, game hash, payload hash and length)
  and the pickle of the game (not compressed: inflating cost a read more than anything else). Every field is checked
  before the payload is unpickled; an entry that fails (truncated, corrupted, another version's, not owned by this
  user) is counted, logged and rebuilt.
* **A warm read** unpickles what the fast engine plays, not the rest, and makes few objects: the game's
  fast-downward translation is a compressed pickle of its own inside the payload (covered by its checksum), unpickled
  when the planner or the stock engine first needs it (``engine.Translation``); the SAS task's operators and the
  static command texts are decoded one at a time on first use (``sas.PackedOperators``, ``sas.PackedTexts``); its
  watch lists and ranks are int arrays (``sas.Watchers``); the facts are a row per signature (:class:`FactTable`),
  and a fact another game of the process has is that game's object.
* **Writes** go to a temporary file in the entry's directory, then ``os.replace`` (atomic on POSIX), so a reader sees
  a whole entry or none. A lock file per entry (``filelock``: ``flock`` on Unix) makes processes that need the same
  game at once compile it once: the others wait, then read the entry. A store that cannot be written (read-only or
  full disk) logs a warning and the game is played uncached.

:func:`precompile` compiles a list of games into the store in spawned worker processes, ahead of a rollout (run it
in a thread to overlap: an env that reaches a game being compiled waits on its lock, then reads it).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import io
import json
import logging
import os
import pickle
import sys
import tempfile
import threading
import zlib
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from agentgym_r1.error import ConfigError, require

log = logging.getLogger(__name__)

FORMAT = 4  # bump when the entry layout changes; engine_version() covers the stored objects' code
MAGIC = b"agentgym-r1 alfworld compiled game\n"
ENV_VAR = "AGENTGYM_R1_COMPILE_CACHE"
OFF = frozenset({"0", "off", "false", "no", "none"})
LOCK_TIMEOUT = 300.0  # seconds to wait for another process compiling the same game, then compile it here too
_SOURCES = ("compiled.py", "engine.py", "fast.py", "sas.py", "textgen.py")  # the modules an entry's objects use
_DISTRIBUTIONS = ("textworld", "fast-downward-textworld", "alfworld", "tatsu")


@functools.cache
def engine_version() -> str:
    """A hash of everything that shapes a compiled game: :data:`FORMAT`, Python's version, the versions of TextWorld,
    fast-downward, alfworld and TatSu, and the source of the modules whose objects are stored."""
    parts = [f"format {FORMAT}", f"python {sys.version_info[0]}.{sys.version_info[1]}"]
    for dist in _DISTRIBUTIONS:
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} none")
    here = Path(__file__).resolve().parent
    parts += [f"{name} {hashlib.sha256((here / name).read_bytes()).hexdigest()}" for name in _SOURCES]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cache_root() -> Path:
    """``$AGENTGYM_R1_CACHE``, else the user's cache directory for agentgym-r1 (``platformdirs.user_cache_dir``:
    ``$XDG_CACHE_HOME/agentgym-r1``, else ``~/.cache/agentgym-r1`` on Linux)."""
    root = os.environ.get("AGENTGYM_R1_CACHE")
    if root:
        return Path(root).expanduser()
    platformdirs = require("platformdirs", "alfworld", "the ALFWorld game caches")
    return Path(platformdirs.user_cache_dir("agentgym-r1", appauthor=False))


def default_store_root() -> Path | None:
    """``$AGENTGYM_R1_COMPILE_CACHE`` (``None`` when it says ``off``), else ``<cache_root()>/alfworld/compiled``."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        return None if value.lower() in OFF else Path(value).expanduser()
    return cache_root() / "alfworld" / "compiled"


@dataclass
class GameStore:
    """Compiled games on disk under ``root`` (see the module docstring). ``stats`` counts what this process did:
    ``hits`` (entries read), ``compiled`` (games compiled for want of one), ``rejected`` (invalid entries found,
    then rebuilt), ``writes`` and ``write_errors``."""

    root: Path
    stats: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    @classmethod
    def resolve(cls, compile_cache: Any) -> GameStore | None:
        """The store an env's ``compile_cache`` asks for: ``None`` the default (:func:`default_store_root`),
        ``False`` none, a path that directory; anything else raises :class:`ConfigError`."""
        if compile_cache is False:
            return None
        if compile_cache is None:
            root = default_store_root()
            return None if root is None else cls(root)
        if isinstance(compile_cache, str | os.PathLike) and str(compile_cache).strip():
            return cls(Path(compile_cache).expanduser())
        raise ConfigError(
            f"compile_cache must be a directory path, None (the default, ${ENV_VAR} or the user's cache "
            f"directory) or False (no disk cache), got {compile_cache!r}"
        )

    def entry(self, digest: str) -> Path:
        return self.root / engine_version() / digest[:2] / f"{digest}.game"

    def lock(self, digest: str) -> Any:
        """A lock on the entry across processes: a ``filelock.FileLock`` (``flock`` on Unix), whose ``acquire``
        raises ``filelock.Timeout`` (a ``TimeoutError``) after :data:`LOCK_TIMEOUT` seconds; ``OSError`` when the
        directory cannot be made or written."""
        filelock = require("filelock", "alfworld", "the ALFWorld compiled-game cache")
        path = self.entry(digest)
        path.parent.mkdir(parents=True, exist_ok=True)  # filelock before 3.10 does not make it
        return filelock.FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT)

    def load(self, path: str, digest: str, kind: type) -> Any:
        """The compiled game (an instance of ``kind``, the engine's ``CompiledGame``) of the file ``path`` (whose
        bytes hash to ``digest``), or ``None`` when there is no valid entry; an invalid one is logged and counted in
        ``stats["rejected"]``."""
        entry = self.entry(digest)
        try:
            with open(entry, "rb") as f:
                owner = os.fstat(f.fileno()).st_uid
                blob = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cannot read the compiled game %s (%s); compiling %s again", entry, e, path)
            return None
        game, problem = _decode(blob, digest, kind)
        if game is None or (hasattr(os, "getuid") and owner != os.getuid()):
            problem = problem or f"owned by uid {owner}, not this user"
            log.warning("invalid compiled game %s (%s); rebuilding it from %s", entry, problem, path)
            self.stats["rejected"] += 1
            return None
        game.path = path  # the entry may have been written for a copy of the file elsewhere
        self.stats["hits"] += 1
        return game

    def save(self, game: Any, digest: str) -> None:
        """Write ``game`` as the entry of ``digest``, atomically; a failure is logged, never raised."""
        entry = self.entry(digest)
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=entry.name + ".", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_encode(game, digest))
                os.replace(tmp, entry)  # atomic: readers see the old entry, none, or this one whole
            except BaseException:
                os.unlink(tmp)
                raise
        except (OSError, pickle.PicklingError, TypeError) as e:
            log.warning("cannot write the compiled game %s (%s); it stays compiled in this process only", entry, e)
            self.stats["write_errors"] += 1
            return
        self.stats["writes"] += 1


class _Pickler(pickle.Pickler):
    """Pickles TextWorld's ``Variable``, ``Placeholder``, ``Signature`` and ``Proposition`` as calls that rebuild them
    (:func:`_variable` and its neighbours). Each keeps its hash in a slot, computed once from ``str`` hashes
    (``textworld/logic/__init__.py``: ``self._hash = hash((self.name, self.type))``), and ``str`` hashes differ between
    processes (``PYTHONHASHSEED``): restored as stored, a game read in another process finds nothing in its fact
    indexes ("you see nothing"). fast-downward's translated conditions cache a hash too (``self.hash``); nothing looks
    them up after the translation, so they are kept as they are.

    TextWorld's ``GameLogic`` and its ``ContextSensitiveGrammar`` are pickled in :class:`Shared` parts (the domain's
    actions and types, each rule name's productions), so the games of a process share what their grammars share."""

    def reducer_override(self, obj: Any) -> Any:
        rebuild = _rebuilders().get(type(obj))
        return NotImplemented if rebuild is None else rebuild(obj)


@functools.cache
def _rebuilders() -> dict[type, Any]:
    from textworld.envs.pddl.logic import GameLogic
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar
    from textworld.logic import Placeholder, Proposition, Signature, Variable

    return {
        Variable: lambda v: (_variable, (v.name, v.type)),
        Placeholder: lambda p: (_placeholder, (p.name, p.type)),
        Signature: lambda s: (_signature, (s.name, s.types)),
        Proposition: lambda p: (_proposition, (p.name, p.arguments)),
        ContextSensitiveGrammar: lambda g: (_grammar, ({name: Shared(rules) for name, rules in g._rules.items()},)),
        GameLogic: lambda g: (_logic, (g.domain, g.grammar, Shared(g.actions), Shared(g.types))),
    }


# What the constructors of TextWorld's logic objects set (textworld/logic/__init__.py), without their call: Signature
# and Proposition are built through a memoizing metaclass (``mementos``: a process-wide dict, keyed by a tuple made
# in Python for every call, that keeps every instance made for ever), three quarters of a stored game's facts' cost.
# The objects compare and hash by value, as the constructors' do. Variables, placeholders and signatures are values
# that many facts and games repeat: a process keeps one of each (bounded), as the metaclass keeps its signatures.
_VALUES: dict[tuple[Any, ...], Any] = {}
_VALUES_SIZE = 1 << 18


@functools.cache
def _logic_classes() -> tuple[type, type, type, type]:
    from textworld.logic import Placeholder, Proposition, Signature, Variable

    return Variable, Placeholder, Signature, Proposition


def _value(kind: int, name: str, second: Any) -> Any:
    key = (kind, name, second)
    obj = _VALUES.get(key)
    if obj is None:
        obj = object.__new__(_logic_classes()[kind])
        obj.name, obj._hash = name, hash((name, second))
        if kind == 2:
            obj.types = second
        else:
            obj.type = second
        if len(_VALUES) >= _VALUES_SIZE:
            _VALUES.clear()
        _VALUES[key] = obj
    return obj


def _variable(name: str, type_: str) -> Any:
    return _value(0, name, type_)


def _placeholder(name: str, type_: str) -> Any:
    return _value(1, name, type_)


def _signature(name: str, types: tuple[str, ...]) -> Any:
    return _value(2, name, types)


def _proposition(name: str, arguments: tuple[Any, ...], signature: Any = None) -> Any:
    """A proposition as its constructor makes it; ``signature`` when the caller has it already (a fact table's row)."""
    p = object.__new__(_logic_classes()[3])
    p.name, p.arguments = name, arguments
    p.signature = _value(2, name, tuple(v.type for v in arguments)) if signature is None else signature
    p._hash = hash((name, arguments))
    return p


class FactTable:
    """A ``textworld.logic.State``'s facts (``State._facts``: signature -> set of propositions), pickled as one row
    per signature (its name, its types, and its facts' argument names as one string) and rebuilt by
    :func:`fact_table`: one call per signature, not a call per fact and per argument (a read's largest part before).
    Rebuilt facts are the values the constructors make (:func:`_proposition`)."""

    __slots__ = ("facts",)

    def __init__(self, facts: dict[Any, set[Any]]) -> None:
        self.facts = facts

    def __reduce__(self) -> tuple[Any, ...]:
        rows = []
        for sig, props in self.facts.items():
            args = sorted("\t".join(v.name for v in p.arguments) for p in props)  # sorted: equal sets, equal bytes
            if any(tuple(v.type for v in p.arguments) != sig.types for p in props) or any(
                "\n" in a or "\t" in a for p in props for a in (v.name for v in p.arguments)
            ):  # PDDL names have no whitespace; a fact that breaks the layout leaves the game unstored (GameStore.save)
                raise pickle.PicklingError(f"a fact of {sig} does not fit a fact table row")
            rows.append((sig.name, sig.types, len(args), "\n".join(args)))
        return (fact_table, (tuple(rows),))


def fact_table(rows: tuple[tuple[str, tuple[str, ...], int, str], ...]) -> Any:
    """The ``State._facts`` (a ``defaultdict(set)``) that :class:`FactTable` pickled. A process keeps one proposition
    per fact it read (bounded, as TextWorld's metaclass keeps every one it makes): the games of a split share most of
    their facts (static ones such as ``cancontain``, and generated games reuse object names), and a fact read before
    costs one dict lookup."""
    table: defaultdict[Any, set[Any]] = defaultdict(set)
    for name, types, count, text in rows:
        sig = _value(2, name, types)
        known = _FACTS.get((name, types))
        if known is None:
            if len(_FACTS) >= _FACT_KEYS:
                _FACTS.clear()
            known = _FACTS[(name, types)] = {}
        elif len(known) >= _FACTS_SIZE:
            known.clear()
        props = set()
        for line in (text.split("\n") if types else [""]) if count else ():
            p = known.get(line)
            if p is None:
                p = known[line] = _proposition(name, tuple(map(_variable, line.split("\t"), types)), sig)
            props.add(p)
        table[sig] = props
    return table


_FACTS: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}  # (predicate, types) -> argument names -> proposition
_FACTS_SIZE = 1 << 13  # facts kept per predicate and types (about 300 bytes each); ALFWorld has about 25 such pairs
_FACT_KEYS = 1 << 10


def _grammar(rules: dict[str, list[Any]]) -> Any:
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar

    grammar = ContextSensitiveGrammar()
    grammar._rules.update(rules)  # its one field (textgen: ``self._rules = defaultdict(list)``)
    return grammar


def _logic(domain: str, grammar: Any, actions: dict[str, Any], types: Any) -> Any:
    from textworld.envs.pddl.logic import GameLogic

    logic = object.__new__(GameLogic)  # GameLogic.__init__ parses the grammar text: its four fields instead
    logic.domain, logic.grammar, logic.actions, logic.types = domain, grammar, actions, types
    return logic


class Shared:
    """A part of a stored game that other games may hold too, pickled as its own pickle's bytes and their hash: a
    process that read an equal part from another game gets that object back and unpickles nothing
    (:func:`shared`). Only for parts that play never changes (parsed rules, queries, a domain's actions and types;
    caches that fill as a pure function of the part are fine), since the games of a process then hold one object.
    Equal bytes are equal parts; equal parts pickled to different bytes are only a miss."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __reduce__(self) -> tuple[Any, ...]:
        blob = _pickled(self.obj)
        return (shared, (hashlib.blake2b(blob, digest_size=16).digest(), blob))


SHARED_SIZE = 8192  # parts kept per process: a real ALFWorld grammar has about 40 rule names, most shared by all games
_SHARED: OrderedDict[bytes, Any] = OrderedDict()
_SHARED_LOCK = threading.Lock()


def shared(key: bytes, blob: bytes) -> Any:
    """The part whose pickle hashes to ``key``: the one this process already holds, else ``blob`` unpickled (its
    bytes are inside an entry's payload, whose checksum was checked before anything was unpickled)."""
    with _SHARED_LOCK:
        obj = _SHARED.get(key, _SHARED)
        if obj is not _SHARED:
            _SHARED.move_to_end(key)
            return obj
    obj = pickle.loads(blob)
    with _SHARED_LOCK:
        obj = _SHARED.setdefault(key, obj)  # two threads that read one part keep the first
        while len(_SHARED) > SHARED_SIZE:
            _SHARED.popitem(last=False)
    return obj


def clear_shared() -> None:
    """Forget the parts read so far (tests and benchmarks of the store start from it)."""
    with _SHARED_LOCK:
        _SHARED.clear()


def _pickled(obj: Any) -> bytes:
    """``obj`` pickled with :class:`_Pickler` (TextWorld's logic objects rebuilt, grammar parts shared)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def pack(obj: Any) -> bytes:
    """``obj`` as a zlib-compressed pickle, with TextWorld's logic objects pickled by constructor (:class:`_Pickler`);
    :func:`unpack` reads it. Only for bytes that a checksum guards (an entry's payload): unpickling runs code."""
    return zlib.compress(_pickled(obj), 1)


def unpack(blob: bytes) -> Any:
    """What :func:`pack` packed."""
    return loads(zlib.decompress(blob))


def loads(raw: bytes) -> Any:
    """``pickle.loads(raw)`` with the cyclic garbage collector paused. Unpickling a game makes thousands of
    containers, none of them garbage: the collector's passes during it (triggered by allocation counts) find nothing
    and scan the graph again and again, so it is paused for the call and restored as found (a thread that turns it
    off meanwhile may see it on again: harmless)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(raw)
    finally:
        if enabled:
            gc.enable()


def _encode(game: Any, digest: str) -> bytes:
    # Not compressed: inflating the payload cost a warm read more than its checksum over four times the bytes (1.6 ms
    # against 0.3 ms a game); the parts a read leaves for later (the translation) are compressed on their own.
    payload = _pickled(game)
    header = {
        "format": FORMAT,
        "engine": engine_version(),
        "game": digest,
        "payload": hashlib.sha256(payload).hexdigest(),
        "size": len(payload),
    }
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload


def _decode(blob: bytes, digest: str, kind: type) -> tuple[Any, str | None]:
    """``(game, None)`` for a valid entry, else ``(None, what is wrong)``; nothing is unpickled before the header
    and the payload's hash check out."""
    if not blob.startswith(MAGIC):
        return None, "no magic line"
    end = blob.find(b"\n", len(MAGIC))
    if end < 0:
        return None, "unreadable header"
    payload = memoryview(blob)[end + 1 :]  # a view: the payload is not copied
    try:
        header = json.loads(blob[len(MAGIC) : end])
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict):
        return None, "unreadable header"
    expected = {"format": FORMAT, "engine": engine_version(), "game": digest, "size": len(payload)}
    wrong = [k for k, v in expected.items() if header.get(k) != v]
    if wrong:
        return None, f"header fields {wrong} differ (another version, or truncated)"
    if header.get("payload") != hashlib.sha256(payload).hexdigest():
        return None, "payload checksum mismatch"
    try:
        game = loads(payload)
    except Exception as e:  # a payload that hashes right but does not load: written by a broken build
        return None, f"payload does not load ({type(e).__name__}: {e})"
    if not isinstance(game, kind):
        return None, f"payload is a {type(game).__name__}, not a {kind.__name__}"
    return game, None


def file_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


engine_version()  # hashed as the engine's modules are imported, not when a first game is stored after an upgrade
