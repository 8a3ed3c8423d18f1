"""The per-env baselines: every registered policy loads; the GSM8K and ToolEnv ones are checked end to end; the
HotpotQA, ALFWorld and WebShop ones run against their envs when those are registered in this checkout, and their
text-reading rules are checked on text in the shapes those envs publish."""

from __future__ import annotations

import importlib

import pytest

from agentgym_r1.leaderboard.baselines import alfworld, reader, webshop
from agentgym_r1.leaderboard.baselines.hotpotqa import question_of, results_of, supporting_titles
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.models import make_policy
from agentgym_r1.leaderboard.policies import POLICY_SPECS
from agentgym_r1.leaderboard.store import ResultsStore
from agentgym_r1.leaderboard.suites import SUITES, is_registered


@pytest.mark.parametrize("spec", POLICY_SPECS, ids=lambda s: f"{s.family}-{s.name}")
def test_every_registered_policy_loads(spec):
    module, _, attr = spec.entry_point.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    assert cls.is_oracle == (spec.kind == "oracle")


@pytest.mark.parametrize("entry", SUITES["quick"], ids=lambda e: e.env_id)
def test_suite_baselines_on_the_env(entry, tmp_path):
    if not is_registered(entry.env_id):
        pytest.skip(f"{entry.env_id} is not registered in this checkout")
    episodes = 1 if entry.env_id.startswith("AgentR1/ALFWorld-") else 3  # ALFWorld's random agent plays 50 turns
    jobs = [Job(entry.env_id, entry.source, p, episodes=episodes) for p in entry.policies]
    outcomes = {o.job.policy: o for o in run_jobs(jobs, tmp_path / "r.sqlite", workers=1)}
    assert all(o.status == "done" for o in outcomes.values()), {p: o.message for p, o in outcomes.items()}
    store = ResultsStore(tmp_path / "r.sqlite")
    errors = [e.error for r in store.runs() for e in store.episodes(r["id"]) if e.error]
    assert not errors
    assert outcomes["oracle"].successes == episodes  # the oracle solves every task
    assert outcomes["random"].successes <= outcomes["oracle"].successes


HOTPOT_OBS = (
    "You answer questions by searching.\n\nQuestion: Which magazine was started first, Arthur's Magazine "
    "or First for Women?"
)
RESULTS = (
    "<tool_response>\nDoc 1 (Title: \"Arthur's Magazine\") Arthur's Magazine (1844-1846) was an American "
    'literary periodical published in Philadelphia.\nDoc 2 (Title: "First for Women") First for Women is a '
    "woman's magazine published by Bauer Media Group in the USA. The magazine was started in 1989.\n"
    "</tool_response>"
)


def test_hotpotqa_reader_on_search_r1_style_results():
    question = question_of(HOTPOT_OBS)
    assert question.startswith("Which magazine")
    passages = results_of(RESULTS)
    assert [p.title for p in passages] == ["Arthur's Magazine", "First for Women"]
    assert reader.comparison_options(question) == ("Arthur's Magazine", "First for Women")
    assert reader.read(question, passages) == "Arthur's Magazine"  # 1844 < 1989, and "first" asks for the smaller
    bridge = [reader.Passage("Bauer Media Group", "Bauer Media Group is based in Hamburg, Germany.")]
    assert reader.read("In which city is the publisher of First for Women based?", bridge) == "Hamburg"
    assert reader.read("When was First for Women started?", passages) == "1989"
    assert reader.read("Are both magazines American?", passages) == "yes"


def test_hotpotqa_supporting_titles_in_both_layouts():
    assert supporting_titles({"supporting_facts": {"title": ["A", "B", "A"], "sent_id": [0, 1, 2]}}) == ["A", "B"]
    assert supporting_titles({"supporting_facts": [["A", 0], ["B", 3]]}) == ["A", "B"]
    assert supporting_titles({}) == []


@pytest.mark.parametrize(
    ("text", "goal"),
    [
        ("Your task is to: put some spraybottle on toilet.", alfworld.Goal("spraybottle", "toilet")),
        ("Your task is to: put a clean apple in fridge.", alfworld.Goal("apple", "fridge", "clean")),
        ("Your task is to: heat some egg and put it in countertop.", alfworld.Goal("egg", "countertop", "heat")),
        ("Your task is to: find two pillow and put them in sofa.", alfworld.Goal("pillow", "sofa", count=2)),
        ("Your task is to: look at bowl under the desklamp.", alfworld.Goal("bowl", None, lamp="desklamp")),
    ],
)
def test_alfworld_goals_parse(text, goal):
    assert alfworld.parse_goal("-= Welcome to TextWorld, ALFRED! =-\n\n" + text) == goal


def test_alfworld_rule_agent_takes_cleans_and_places():
    policy = alfworld.RuleReActPolicy()
    policy.goal = alfworld.parse_goal("Your task is to: put a clean apple in fridge.")
    policy.holding, policy.done_transform, policy.placed, policy.visited, policy.opened = None, False, set(), [], set()
    policy.last = ""
    here = ["go to countertop 1", "go to fridge 1", "go to sinkbasin 1", "look", "take apple 1 from countertop 1"]
    assert policy.act("You see an apple 1.", {"env": {"admissible_commands": here}}) == "take apple 1 from countertop 1"
    assert policy.act("You pick up the apple 1.", {"env": {"admissible_commands": here}}) == "go to sinkbasin 1"
    sink = ["clean apple 1 with sinkbasin 1", "go to fridge 1", "go to countertop 1"]
    assert (
        policy.act("You arrive at sinkbasin 1.", {"env": {"admissible_commands": sink}})
        == "clean apple 1 with sinkbasin 1"
    )
    assert policy.act("You clean the apple 1.", {"env": {"admissible_commands": sink}}) == "go to fridge 1"
    fridge = ["open fridge 1", "go to countertop 1"]
    assert policy.act("The fridge 1 is closed.", {"env": {"admissible_commands": fridge}}) == "open fridge 1"
    inside = ["move apple 1 to fridge 1", "close fridge 1"]
    assert policy.act("You open the fridge 1.", {"env": {"admissible_commands": inside}}) == "move apple 1 to fridge 1"


def test_webshop_available_actions_in_both_shapes_and_the_rule_shopper():
    assert webshop.available({"env": {"available_actions": {"has_search_bar": True, "clickables": ["search"]}}}) == (
        True,
        ["search"],
    )
    assert webshop.available({"env": {"available_actions": ["search[...]", "click[B01]", "Buy Now"]}}) == (
        True,
        ["B01", "Buy Now"],
    )
    policy = webshop.RuleShopperPolicy()
    obs = "WebShop [SEP] Instruction: [SEP] i need a blue cotton shirt, and price lower than 30.00 dollars [SEP] Search"
    policy.reset(None, obs, {})  # the policy reads only the page
    search_page = {"env": {"available_actions": {"has_search_bar": True, "clickables": []}}}
    assert policy.act(obs, search_page) == "search[i need a blue cotton shirt]"
    results = {
        "env": {
            "available_actions": {
                "has_search_bar": False,
                "clickables": ["back to search", "next >", "b0aaaaaaaa", "b0bbbbbbbb"],
            }
        }
    }
    page = (
        "WebShop [SEP] Instruction: [SEP] i need ... [SEP] Back to Search [SEP] Page 1 (Total results: 2) [SEP] "
        "Next > [SEP] B0AAAAAAAA [SEP] Red Cotton Shirt [SEP] $45.0 [SEP] B0BBBBBBBB [SEP] Blue Shirt [SEP] $19.99"
    )
    assert policy.act(page, results) == "click[b0bbbbbbbb]"  # the first result under the price limit
    assert policy.act(page.replace("$19.99", "$39.99"), results) == "click[b0aaaaaaaa]"  # none is: the first one
    item = {
        "env": {
            "available_actions": {
                "has_search_bar": False,
                "clickables": ["back to search", "< prev", "red", "blue", "small", "description", "buy now"],
            }
        }
    }
    assert policy.act("", item) == "click[blue]"
    assert policy.act("", item) == "click[buy now]"


def test_random_policies_are_seeded():
    info = {"env": {"admissible_commands": [f"go to shelf {i}" for i in range(20)]}}
    a, b = alfworld.RandomAdmissiblePolicy(seed=1), alfworld.RandomAdmissiblePolicy(seed=1)
    assert [a.act("", info) for _ in range(5)] == [b.act("", info) for _ in range(5)]
    assert make_policy("random", "AgentR1/WebShop-v0", seed=2).rng.integers(100) == make_policy(
        "random", "AgentR1/WebShop-v0", seed=2
    ).rng.integers(100)


def test_reader_compares_the_asked_attribute_and_answers_same_questions_from_the_passages():
    city = [
        reader.Passage("Mommere", "Mommere is a city. It was founded in 1164 and has a population of 1,446,366."),
        reader.Passage(
            "Taithirford", "Taithirford is a city. It was founded in 945 and has a population of 1,982,467."
        ),
    ]
    assert reader.read("Which city has more inhabitants, Mommere or Taithirford?", city) == "Taithirford"
    assert reader.read("Which was founded earlier, Mommere or Taithirford?", city) == "Taithirford"
    assert reader.read("Which was founded later, Mommere or Taithirford?", city) == "Mommere"
    people = [
        reader.Passage("Ana Lind", "Ana Lind (born 1986 in Teskhaven, Seimounmark) is a physician from Seimounmark."),
        reader.Passage("Bo Stru", "Bo Stru (born 1875 in Trapoulvale, Veluthuxia) is a diplomat from Veluthuxia."),
        reader.Passage("Cy Dorn", "Cy Dorn (born 1901 in Teskhaven, Seimounmark) is a painter from Seimounmark."),
    ]
    assert reader.read("Are Ana Lind and Bo Stru from the same country?", people) == "no"
    assert reader.read("Are Ana Lind and Cy Dorn from the same country?", people) == "yes"


def test_rule_react_searches_the_bridge_entity_and_reads_its_passage():
    from agentgym_r1.leaderboard.baselines.hotpotqa import RuleReActPolicy, both_entities

    assert both_entities("Are Ana Lind and Bo Stru from the same country?") == ("Ana Lind", "Bo Stru")
    policy = RuleReActPolicy()
    obs = "Search to answer.\n\nIn which city is the brewery that Faetath Vaimask works at headquartered?"
    policy.reset(None, obs, {})  # the policy reads only the observation
    assert '"query": "In which city' in policy.act(obs, {})
    hop1 = (
        "<tool_response>\nDoc 1 (Title: Faetath Vaimask) Faetath Vaimask (born 1965 in Breivelarkport) is a "
        "painter. He works at Kevu Brewery.\n</tool_response>"
    )
    assert '"query": "Kevu Brewery"' in policy.act(hop1, {})
    hop2 = (
        "<tool_response>\nDoc 1 (Title: Kevu Brewery) Kevu Brewery is a craft brewery founded in 1945 by Staimoril "
        "Kremaidre. Its headquarters are in Treinvale, Rustendavia.\n</tool_response>"
    )
    assert policy.act(hop2, {}) == "<answer>Treinvale</answer>"
