"""The fast ALFWorld engine against TextWorld's own: identical text step by step (a subset of
``benchmarks/alfworld_parity.py``), fast-downward's operator order and goal, the env option, and named errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("textworld")
pytest.importorskip("fast_downward")
pytest.importorskip("alfworld")

from agentgym_r1.envs.alfworld import ALFWorldEnv
from agentgym_r1.envs.alfworld.engine import Engine
from agentgym_r1.envs.alfworld.fast import FastEngine, machine, make_engine
from agentgym_r1.envs.alfworld.generator import generate
from agentgym_r1.envs.alfworld.parity import compare_walks
from agentgym_r1.envs.alfworld.sas import UnsupportedGameError
from agentgym_r1.error import ConfigError
from tests.conftest import SHARED_DATA

REAL_GAMES = sorted((SHARED_DATA / "alfworld" / "json_2.1.1" / "valid_unseen").glob("*/*/game.tw-pddl"))
SUBSET = [0, 5, 9, 13, 16, 21]  # one game of each task type


@pytest.fixture(scope="module")
def engines():
    stock, fast = Engine(), FastEngine()
    yield stock, fast
    stock.close()
    fast.close()


def _real(index: int) -> str:
    if not REAL_GAMES:
        pytest.skip(f"shared ALFWorld data not found under {SHARED_DATA}")
    return str(REAL_GAMES[index])


@pytest.mark.parametrize("index", SUBSET)
def test_real_game_random_walks_match_textworld(engines, index):
    mismatch, compared = compare_walks(*engines, _real(index), walks=1, steps=30, seed=index)
    assert mismatch is None, str(mismatch)
    assert compared >= 2


def test_generated_game_random_walks_match_textworld(engines, tmp_path):
    for index in range(2):
        path = str(generate(7, index, cache_dir=str(tmp_path)))
        mismatch, _ = compare_walks(*engines, path, walks=1, steps=30, seed=index)
        assert mismatch is None, str(mismatch)


def test_walkthrough_wins_on_both_with_the_same_text(engines, tmp_path):
    stock, fast = engines
    path = str(generate(7, 3, cache_dir=str(tmp_path)))
    plan = json.loads(Path(path).read_text(encoding="utf-8"))["walkthrough"]
    a, b = stock.reset(stock.compile(path)), fast.reset(fast.compile(path))
    for command in plan:
        a, b = stock.step(command), fast.step(command)
        assert (a.feedback, a["admissible_commands"]) == (b.feedback, b["admissible_commands"])
    assert a["won"] and b["won"] and b["done"] and b["score"] == 1


def test_operator_order_and_goal_match_fast_downward(engines):
    """The applicable operators, in the order fast-downward's successor generator lists them, at every step."""
    import fast_downward

    stock, _ = engines
    game = stock.compile(_real(16))
    task = machine(game).task
    lib = stock.lib
    lib.load_sas(game.pristine.sas.encode("utf-8"))
    state, rng = task.initial.copy(), np.random.default_rng(0)
    for _ in range(25):
        ops = (fast_downward.Operator * lib.get_applicable_operators_count())()
        lib.get_applicable_operators(ops)
        assert [op.id for op in ops] == state.applicable()
        assert bool(lib.check_goal()) == state.goal()
        chosen = ops[rng.integers(len(ops))].id
        lib.apply_operator(chosen, None)
        state.apply(chosen)


def test_invalid_command_is_nothing_happens_and_keeps_the_state(engines):
    _, fast = engines
    first = fast.reset(fast.compile(_real(0)))
    state = fast.step("fly to the moon")
    assert state.feedback == "Nothing happens." and state["admissible_commands"] == first["admissible_commands"]
    assert state["score"] == 0 and not state["done"]


def test_replan_after_steps_wins(engines):
    _, fast = engines
    state = fast.reset(fast.compile(_real(4)))  # pick_and_place: a short plan
    state = fast.step("inventory")
    for command in fast.replan():
        assert command in state["admissible_commands"]
        state = fast.step(command)
    assert state["won"]


def test_env_plays_both_engines_alike():
    path = _real(9)
    envs = [ALFWorldEnv(source="generated", num_games=1, engine=name) for name in ("fast", "textworld")]
    assert isinstance(envs[0].engine, FastEngine) and isinstance(envs[1].engine, Engine)
    first = [env.reset(options={"game_file": path}) for env in envs]
    assert first[0][0] == first[1][0] and first[0][1]["env"] == first[1][1]["env"]
    plan = envs[0].expert_plan()
    for command in [*plan[:2], "jump", *plan[2:]]:
        out = [env.step(command) for env in envs]
        assert out[0][:4] == out[1][:4] and out[0][4]["env"] == out[1][4]["env"]
    assert out[0][2] and out[0][1] == 1.0
    for env in envs:
        env.close()


def test_unknown_engine_is_a_config_error():
    with pytest.raises(ConfigError, match=r"unknown ALFWorld engine 'pddl'.*'fast'.*'textworld'"):
        ALFWorldEnv(engine="pddl")
    with pytest.raises(ConfigError, match="unknown ALFWorld engine"):
        make_engine("TextWorld")


def test_a_grammar_the_fast_engine_cannot_evaluate_names_the_feature(tmp_path):
    data = json.loads(Path(_real(0)).read_text(encoding="utf-8"))
    data["grammar"] = data["grammar"].replace("{r.name or r.id}", "{r.name.upper()}", 1)
    assert "upper()" in data["grammar"]
    path = tmp_path / "game.tw-pddl"
    path.write_text(json.dumps(data))
    with pytest.raises(UnsupportedGameError, match=r"r\.name\.upper\(\)\}, with a Call.*engine=\"textworld\"") as e:
        FastEngine().compile(str(path))
    assert str(path) in str(e.value)
    Engine().compile(str(path))  # the stock engine loads it


def test_steps_parse_nothing_after_compile(engines, monkeypatch):
    """TextWorld's tatsu parsers are shared objects: after compile, a fast step never calls them."""
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar
    from textworld.logic import Rule

    _, fast = engines
    game = fast.compile(_real(13))

    def refuse(*args, **kwargs):
        raise AssertionError("parsed at step time")

    monkeypatch.setattr(Rule, "parse_conjunctive_query", refuse)
    monkeypatch.setattr(ContextSensitiveGrammar, "parse", refuse)
    state, rng = fast.reset(game), np.random.default_rng(1)
    for _ in range(30):
        commands = state["admissible_commands"]
        state = fast.step(commands[rng.integers(len(commands))])


LAMPS_DOMAIN = """(define (domain lamps)
  (:requirements :typing :conditional-effects :derived-predicates :negative-preconditions)
  (:types lamp room)
  (:predicates (on ?l - lamp) (in ?l - lamp ?r - room) (lit ?r - room) (here ?r - room) (broken ?l - lamp)
               (door ?a - room ?b - room))
  (:derived (lit ?r - room) (exists (?l - lamp) (and (in ?l ?r) (on ?l))))
  (:action toggle :parameters (?l - lamp ?r - room)
     :precondition (and (here ?r) (in ?l ?r) (not (broken ?l)))
     :effect (and (when (on ?l) (not (on ?l))) (when (not (on ?l)) (on ?l))))
  (:action move :parameters (?a - room ?b - room) :precondition (and (here ?a) (door ?a ?b))
     :effect (and (not (here ?a)) (here ?b)))
  (:action smash :parameters (?l - lamp ?r - room) :precondition (and (here ?r) (in ?l ?r) (lit ?r))
     :effect (and (broken ?l) (when (on ?l) (not (on ?l))))))"""
LAMPS_PROBLEM = """(define (problem p) (:domain lamps)
  (:objects l1 l2 l3 - lamp r1 r2 - room)
  (:init (here r1) (in l1 r1) (in l2 r1) (in l3 r2) (door r1 r2) (door r2 r1))
  (:goal (and (lit r2) (broken l1))))"""


def test_conditional_effects_and_axioms_match_fast_downward(engines, monkeypatch):
    """ALFWorld's rooms have neither; the state machine still applies them as fast-downward does."""
    import sys

    import fast_downward

    from agentgym_r1.envs.alfworld.sas import SasTask

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the translator overwrites sys.argv
    _, sas = fast_downward.pddl2sas(LAMPS_DOMAIN, LAMPS_PROBLEM)
    task = SasTask.parse(sas)
    assert task.axioms and any(conditions for op in task.operators for _, _, conditions in op.effects)
    lib, goals = engines[0].lib, 0
    for walk in range(20):
        lib.load_sas(sas.encode("utf-8"))
        state, rng = task.initial.copy(), np.random.default_rng(walk)
        for _ in range(20):
            ops = (fast_downward.Operator * lib.get_applicable_operators_count())()
            lib.get_applicable_operators(ops)
            assert [op.id for op in ops] == state.applicable()
            assert bool(lib.check_goal()) == state.goal()
            goals += state.goal()
            chosen = ops[rng.integers(len(ops))].id
            lib.apply_operator(chosen, None)
            state.apply(chosen)
    assert goals > 0


def test_engines_sharing_a_game_keep_their_own_state():
    path = _real(13)
    one, two = FastEngine(), FastEngine()
    game = one.compile(path)
    assert two.compile(path) is game  # one compiled game, shared
    first = one.reset(game)
    two.reset(game)
    for command in ("go to fridge 1", "open fridge 1"):
        state = one.step(command)
        assert state.feedback != "Nothing happens."
    again = two.reset(game)
    assert again.feedback == first.feedback and again["admissible_commands"] == first["admissible_commands"]
    assert two.step("open fridge 1").feedback == "Nothing happens."  # two never went to the fridge
    assert one.step("close fridge 1").feedback == "You close the fridge 1."
