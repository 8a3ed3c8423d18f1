"""Compiled ALFWorld games on disk: hit and miss, identical episodes from a cached game, invalid entries rebuilt,
engine versions apart, two processes compiling one game once, precompile in workers, and bad input."""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("textworld")
pytest.importorskip("fast_downward")
pytest.importorskip("alfworld")

from agentgym_r1.envs.alfworld import ALFWorldEnv, compiled
from agentgym_r1.envs.alfworld.compiled import ENV_VAR, FactTable, GameStore, file_digest, pack, unpack
from agentgym_r1.envs.alfworld.engine import TRANSLATION, Engine, clear_compiled
from agentgym_r1.envs.alfworld.fast import FastEngine
from agentgym_r1.envs.alfworld.parity import invalid_command
from agentgym_r1.envs.alfworld.precompile import precompile
from agentgym_r1.envs.alfworld.sas import PackedOperators, PackedRows, PackedTexts
from agentgym_r1.error import ConfigError, DataNotFoundError
from tests.conftest import SHARED_DATA

REAL_GAMES = sorted((SHARED_DATA / "alfworld" / "json_2.1.1" / "valid_unseen").glob("*/*/game.tw-pddl"))
KEYS = ("feedback", "admissible_commands", "_valid_commands", "won", "lost", "score", "done")


def _real(index: int) -> str:
    if not REAL_GAMES:
        pytest.skip(f"shared ALFWorld data not found under {SHARED_DATA}")
    return str(REAL_GAMES[index])


def walk(engine, game, steps: int = 25, seed: int = 0) -> list[dict]:
    """A seeded walk (a fifth of the commands invalid): every state's text, commands and flags."""
    rng = np.random.default_rng(seed)
    state = engine.reset(game)
    seen = [{k: state.get(k) for k in KEYS}]
    names = sorted(game.names)
    for _ in range(steps):
        admissible = state["admissible_commands"]
        if rng.random() < 0.2:
            command = invalid_command(rng, admissible, names)
        else:
            command = admissible[rng.integers(len(admissible))]
        state = engine.step(command)
        seen.append({"command": command, **{k: state.get(k) for k in KEYS}})
        if state["done"]:
            break
    return seen


def load_fresh(store: GameStore, path: str):
    """The game compiled by a fast engine on ``store``, with the in-process cache emptied first."""
    clear_compiled()
    engine = FastEngine(store)
    return engine, engine.compile(path)


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """One game compiled into a new store: the store, the game's entry bytes and a walk on the fresh compilation."""
    path = _real(0)
    store = GameStore(tmp_path_factory.mktemp("store"))
    engine, game = load_fresh(store, path)
    assert dict(store.stats) == {"compiled": 1, "writes": 1}
    entry = store.entry(file_digest(Path(path).read_bytes()))
    return store, path, entry.read_bytes(), walk(engine, game)


def test_a_cold_compile_is_written_and_a_warm_one_read_with_the_same_episode(cold):
    store, path, blob, fresh = cold
    engine, game = load_fresh(store, path)
    assert store.stats["hits"] == 1 and store.stats["compiled"] == 1  # read, not compiled again
    assert game.path == os.path.abspath(path) and game.machine is not None  # compile keys on the normalized path
    assert walk(engine, game) == fresh
    stock = Engine(store)  # the stock engine plays the stored translation too (fast-downward reloads its SAS)
    try:
        clear_compiled()
        state = stock.reset(stock.compile(path))
        assert (state.feedback, state["admissible_commands"]) == (fresh[0]["feedback"], fresh[0]["admissible_commands"])
    finally:
        stock.close()
    assert store.stats["hits"] == 2


def test_a_stored_translation_is_read_on_first_need_as_compiled(cold):
    """An entry's fast-downward translation (task, SAS texts) is unpickled only when the planner or the stock engine
    needs it, not to play on the fast engine; then it is the one a fresh compilation makes."""
    store, path, _, fresh = cold
    engine, game = load_fresh(store, path)
    assert walk(engine, game) == fresh
    assert not set(TRANSLATION) & set(vars(game.pristine))  # played without it
    clear_compiled()
    compiled_now = FastEngine(None).compile(path)
    state = game.copy_facts()  # a copy made before the first need reads it too, and shares it
    assert state.sas == compiled_now.pristine.sas and game.pristine.sas_replan == compiled_now.pristine.sas_replan
    assert state.task is game.pristine.task and state.sas is game.pristine.sas
    assert [str(a) for a in game.pristine.task.init] == [str(a) for a in compiled_now.pristine.task.init]
    assert sorted(game.pristine._actions) == sorted(compiled_now.pristine._actions)
    with pytest.raises(AttributeError, match="no attribute 'not_a_field'"):
        game.pristine.not_a_field  # noqa: B018


def test_a_stored_task_decodes_its_packed_operators_to_the_compiled_ones(cold):
    store, path, _, _ = cold
    _, game = load_fresh(store, path)
    clear_compiled()
    task, stored = FastEngine(None).compile(path).machine.task, game.machine.task
    assert isinstance(stored.operators, PackedOperators) and isinstance(stored.value_names, PackedRows)
    assert stored.names == [op.name for op in task.operators]  # names alone, before any operator is decoded
    assert stored.operators[-1] == task.operators[-1] and stored.operators[2:5] == task.operators[2:5]
    assert list(stored.operators) == task.operators and len(stored.operators) == len(task.operators)
    assert any(conditions for op in stored.operators for _, _, conditions in op.effects)  # conditional effects too
    assert list(stored.value_names) == task.value_names and stored.value_names[-1] == task.value_names[-1]
    again = unpack(pack(stored))  # a stored task stored again keeps its packed form
    assert list(again.operators) == task.operators and (again.rank, again.watch) == (task.rank, task.watch)
    commands = FastEngine(None).compile(path).machine.commands
    assert isinstance(game.machine.commands, PackedTexts) and list(game.machine.commands) == commands
    packed = unpack(pack(PackedTexts.of(["a", None, "", "bc"])))  # a None (a dynamic text) and an empty one kept apart
    assert list(packed) == ["a", None, "", "bc"] and packed[-1] == "bc" and packed[1:3] == [None, ""]


def test_the_watch_lists_are_the_operators_that_read_each_value_in_operator_order(cold):
    """A state's applicable set is kept by the operators each (variable, value) holds a precondition of; the packed
    rows are exactly those, in operator order, for every value of every variable (and empty where none reads it)."""
    store, path, _, _ = cold
    _, game = load_fresh(store, path)
    task = game.machine.task
    expected: dict[tuple[int, int], list[int]] = {}
    for i, op in enumerate(task.operators):
        for pair in op.preconditions:
            expected.setdefault(pair, []).append(i)
    rows = {
        (var, value): list(task.watch.ops(var, value))
        for var in range(len(task.value_names))
        for value in range(len(task.value_names[var]))
    }
    assert {k: v for k, v in rows.items() if v} == expected and len(expected) > 100
    order = sorted(range(len(task.operators)), key=lambda i: task.operators[i].preconditions)
    assert [order.index(i) for i in range(len(order))] == list(task.rank)


def test_unpacking_leaves_the_garbage_collector_as_it_found_it():
    blob = pack({"facts": [(1, 2)] * 3})
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            assert unpack(blob) == {"facts": [(1, 2)] * 3} and gc.isenabled() is enabled
            with pytest.raises(zlib.error):
                unpack(b"not a zlib stream")
            assert gc.isenabled() is enabled  # also when the payload does not load
    finally:
        gc.enable()


def test_an_entry_is_keyed_by_content_so_a_copy_elsewhere_hits(cold, tmp_path):
    store, path, blob, fresh = cold
    copy = tmp_path / "elsewhere" / "game.tw-pddl"
    copy.parent.mkdir()
    copy.write_bytes(Path(path).read_bytes())
    hits = store.stats["hits"]
    engine, game = load_fresh(store, str(copy))
    assert store.stats["hits"] == hits + 1 and game.path == str(copy)  # info names the file played, not the first
    short = walk(engine, game, steps=5)
    assert short == fresh[: len(short)]


def test_games_read_in_one_process_share_equal_grammar_parts_and_play_their_own(cold, tmp_path):
    """Two stored games whose grammars differ in some rules: the second read takes the rules, the domain's actions
    and types equal to the first's from it (the same objects, unpickled once), keeps its own where they differ, and
    each game plays its fresh compilation's episode."""
    store, path, _, fresh = cold
    other = _real(1)
    clear_compiled()
    other_engine = FastEngine(None)
    other_fresh = walk(other_engine, other_engine.compile(other))
    load_fresh(store, other)  # compiled into the store
    compiled.clear_shared()
    engine, game = load_fresh(store, path)
    other_engine, other_game = load_fresh(store, other)
    assert store.stats["hits"] >= 2
    mine, theirs = game.logic.grammar._rules, other_game.logic.grammar._rules
    same = [name for name in mine if [str(r.rhs) for r in mine[name]] == [str(r.rhs) for r in theirs.get(name, [])]]
    differ = [name for name in mine if name in theirs and name not in same]
    assert same and differ  # the two real games' grammars share most rules and differ in some
    assert all(mine[name] is theirs[name] for name in same)
    assert not any(mine[name] is theirs[name] for name in differ)
    assert game.logic.actions is other_game.logic.actions and game.logic.types is other_game.logic.types
    assert game.machine.grammar.types is game.logic.types  # the fast engine's grammar reads the logic it was read with
    assert game.machine.grammar._production is game.logic.grammar._rules
    assert walk(engine, game) == fresh and walk(other_engine, other_game) == other_fresh


def test_stored_facts_are_textworld_propositions_that_hash_and_compare_as_constructed(cold):
    """A stored game's facts are rebuilt without TextWorld's memoizing constructors: each equals, hashes and sorts
    as the constructor's object, and a fact built by the constructor is found in the stored state's indexes."""
    from textworld.logic import Proposition, Signature, Variable

    store, path, _, _ = cold
    _, game = load_fresh(store, path)
    facts = sorted(game.pristine.facts)
    assert facts
    for fact in facts:
        made = Proposition(fact.name, [Variable(v.name, v.type) for v in fact.arguments])
        assert type(fact) is Proposition and made == fact and hash(made) == hash(fact)
        assert fact.signature == Signature(fact.name, [v.type for v in fact.arguments])
        assert hash(fact.signature) == hash(made.signature)
        assert all(hash(v) == hash(Variable(v.name, v.type)) for v in fact.arguments)
        assert made in game.pristine.facts_with_signature(made.signature)


def test_a_fact_table_rebuilds_every_fact_and_reads_share_equal_facts(cold):
    """Facts are stored a row per signature (FactTable): the stored state's facts are the fresh compilation's,
    signature by signature; a nullary fact, an empty signature and three arguments round-trip; a fact read twice is
    one object (the process keeps one per fact, as TextWorld's constructor does)."""
    from textworld.logic import Proposition, Variable

    store, path, _, _ = cold
    _, game = load_fresh(store, path)
    clear_compiled()
    fresh = FastEngine(None).compile(path).pristine._facts
    assert dict(game.pristine._facts) == dict(fresh) and len(fresh) > 5
    a, b, c = Variable("a_1", "object"), Variable("r_2", "receptacle"), Variable("l_3", "location")
    table = defaultdict(set)
    table[Proposition("dark", []).signature].add(Proposition("dark", []))
    table[Proposition("between", [a, b, c]).signature].add(Proposition("between", [a, b, c]))
    table[Proposition("holds", [a]).signature] = set()
    again = unpack(pack(FactTable(table)))
    assert type(again) is defaultdict and again == table and again[Proposition("holds", [a]).signature] == set()
    bad = Variable("a\t1", "object")  # a name that would break a row: not stored (GameStore.save logs it)
    with pytest.raises(pickle.PicklingError, match="does not fit"):
        pack(FactTable({Proposition("holds", [bad]).signature: {Proposition("holds", [bad])}}))
    one, two = unpack(pack(FactTable(fresh))), unpack(pack(FactTable(fresh)))
    assert all(x is y for sig in one for x, y in zip(sorted(one[sig]), sorted(two[sig]), strict=True))


def _truncated(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]


def _flipped(blob: bytes) -> bytes:
    i = len(blob) - 100  # inside the payload
    return blob[:i] + bytes([blob[i] ^ 0x01]) + blob[i + 1 :]


def _another_version(blob: bytes) -> bytes:
    head, _, payload = blob[len(compiled.MAGIC) :].partition(b"\n")
    header = {**json.loads(head), "engine": "0123456789abcdef"}
    return compiled.MAGIC + json.dumps(header).encode() + b"\n" + payload


@pytest.mark.parametrize("spoil", [_truncated, _flipped, _another_version])
def test_an_invalid_entry_is_rebuilt_not_trusted(cold, tmp_path, spoil, caplog):
    _, path, blob, fresh = cold
    store = GameStore(tmp_path)
    entry = store.entry(file_digest(Path(path).read_bytes()))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(spoil(blob))
    engine, game = load_fresh(store, path)
    assert store.stats["rejected"] >= 1 and store.stats["compiled"] == 1 and store.stats["hits"] == 0
    assert "invalid compiled game" in caplog.text
    assert walk(engine, game) == fresh
    assert entry.read_bytes() != spoil(blob)  # rewritten: the next process reads it
    engine, game = load_fresh(store, path)
    assert store.stats["hits"] == 1 and walk(engine, game) == fresh


def test_another_engine_version_neither_reads_nor_overwrites_the_entry(cold, tmp_path, monkeypatch):
    _, path, blob, _ = cold
    store = GameStore(tmp_path)
    entry = store.entry(file_digest(Path(path).read_bytes()))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(blob)
    monkeypatch.setattr(compiled, "engine_version", lambda: "another-version")
    load_fresh(store, path)
    assert store.stats["compiled"] == 1 and store.stats["hits"] == 0
    assert entry.read_bytes() == blob  # the first version's entry is left for it
    assert (tmp_path / "another-version").is_dir()


def test_the_engine_version_follows_the_format_the_code_and_the_libraries(monkeypatch):
    def version() -> str:
        compiled.engine_version.cache_clear()
        return compiled.engine_version()

    versions = [version()]
    monkeypatch.setattr(compiled, "FORMAT", compiled.FORMAT + 1)
    versions.append(version())
    monkeypatch.setattr(compiled, "_SOURCES", ("engine.py", "fast.py", "sas.py"))  # textgen.py's code left out
    versions.append(version())
    monkeypatch.setattr(compiled, "_DISTRIBUTIONS", ("textworld", "alfworld", "tatsu"))  # fast-downward left out
    versions.append(version())
    assert len(set(versions)) == 4
    monkeypatch.undo()
    assert version() == versions[0]  # a pure function of them


COMPILE_ONE = """
import json, sys
from agentgym_r1.envs.alfworld.compiled import GameStore
from agentgym_r1.envs.alfworld.fast import FastEngine
from tests.envs.test_alfworld_compiled import walk
store = GameStore(sys.argv[1])
engine = FastEngine(store)
seen = walk(engine, engine.compile(sys.argv[2]))
print(json.dumps({"stats": dict(store.stats), "walk": seen}))
"""


def test_two_processes_compiling_one_game_at_once_compile_it_once(cold, tmp_path):
    _, path, _, fresh = cold
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [  # different str hashes in each (and in this process): a game must not depend on them
        subprocess.Popen(
            [sys.executable, "-c", COMPILE_ONE, str(tmp_path), path],
            stdout=subprocess.PIPE,
            text=True,
            env={**env, "PYTHONHASHSEED": str(seed)},
        )
        for seed in (1, 2)
    ]
    outs = [json.loads(p.communicate(timeout=240)[0].strip().splitlines()[-1]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert sorted(o["stats"].get("compiled", 0) for o in outs) == [0, 1]  # the other waited on the lock, then read
    assert [o["walk"] for o in outs] == [fresh, fresh]  # the one that read the entry plays the same episode
    files = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    digest = file_digest(Path(path).read_bytes())
    assert files == [f"{digest}.game", f"{digest}.game.lock"]  # one entry, no temporary file left
    _, game = load_fresh(GameStore(tmp_path), path)
    assert game.machine is not None


def test_precompile_in_workers_fills_the_store_and_reports_each_game(cold, tmp_path):
    _, path, blob, _ = cold
    store = GameStore(tmp_path / "store")
    entry = store.entry(file_digest(Path(path).read_bytes()))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(blob)
    broken = tmp_path / "broken" / "game.tw-pddl"
    broken.parent.mkdir()
    broken.write_text("{not json")
    report = precompile([path, _real(5), str(broken), path], workers=2, compile_cache=store.root)
    assert (report.cached, report.compiled) == (1, 1)
    assert list(report.failed) == [str(broken)] and "DataFormatError" in report.failed[str(broken)]
    _, game = load_fresh(store, _real(5))
    assert store.stats["hits"] == 1 and store.stats["compiled"] == 0 and game.machine is not None


def test_the_env_reads_its_store_and_false_turns_it_off(cold, tmp_path):
    _, path, blob, fresh = cold
    store_dir = tmp_path / "store"
    entry = GameStore(store_dir).entry(file_digest(Path(path).read_bytes()))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(blob)
    env = ALFWorldEnv(source=str(SHARED_DATA / "alfworld"), compile_cache=str(store_dir))
    clear_compiled()
    obs, _ = env.reset(options={"game_file": path})
    assert env.store.stats["hits"] == 1 and obs.endswith(fresh[0]["feedback"])
    env.close()
    assert ALFWorldEnv(source=str(SHARED_DATA / "alfworld"), compile_cache=False).store is None


def test_a_store_that_cannot_be_written_warns_and_the_game_plays(cold, tmp_path, caplog):
    _, path, _, fresh = cold
    root = tmp_path / "a-file"
    root.write_text("not a directory")
    store = GameStore(root)
    engine, game = load_fresh(store, path)
    assert store.stats["write_errors"] == 1 and store.stats["writes"] == 0
    assert "compiling it without" in caplog.text and "cannot write the compiled game" in caplog.text
    short = walk(engine, game, steps=5)
    assert short == fresh[: len(short)]


def test_where_the_store_lives(monkeypatch, tmp_path):
    for name in (ENV_VAR, "AGENTGYM_R1_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert GameStore.resolve(None).root == tmp_path / "xdg" / "agentgym-r1" / "alfworld" / "compiled"
    monkeypatch.setenv("AGENTGYM_R1_CACHE", str(tmp_path / "root"))
    assert GameStore.resolve(None).root == tmp_path / "root" / "alfworld" / "compiled"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "mine"))
    assert GameStore.resolve(None).root == tmp_path / "mine"
    assert GameStore.resolve(tmp_path / "given").root == tmp_path / "given"  # the argument wins
    monkeypatch.setenv(ENV_VAR, "off")
    assert GameStore.resolve(None) is None


@pytest.mark.parametrize("value", [123, True, "", ["dir"]])
def test_a_bad_compile_cache_is_refused_before_any_work(value):
    with pytest.raises(ConfigError, match=r"compile_cache must be a directory path.*got"):
        ALFWorldEnv(source="/nonexistent-not-read", compile_cache=value)


def test_bad_precompile_input_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="workers must be a positive int"):
        precompile([], workers=0, compile_cache=tmp_path)
    with pytest.raises(ConfigError, match="wrap it in a list"):
        precompile(str(tmp_path), compile_cache=tmp_path)
    with pytest.raises(DataNotFoundError, match="do not exist"):
        precompile([str(tmp_path / "missing.tw-pddl")], compile_cache=tmp_path)
    with pytest.raises(ConfigError, match="needs a disk cache"):
        precompile([], compile_cache=False)
    assert list(tmp_path.iterdir()) == []
