"""WebShop: the oracle on the shared catalogue, the pages, bad input, sources and the shared catalogue."""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import pytest

from agentgym_r1.envs.webshop import WebShopEnv, load_catalogue
from agentgym_r1.envs.webshop.catalogue import PRODUCT_WINDOW, SEARCH_RETURN_N
from agentgym_r1.envs.webshop.generator import (
    GeneratedProducts,
    check_size,
    generate_goal,
    generate_product,
    index_of,
    iter_products,
)
from agentgym_r1.envs.webshop.reward import in_text
from agentgym_r1.error import ConfigError, DataFormatError, DataNotFoundError, UnknownOptionError
from agentgym_r1.leaderboard.baselines.webshop import WebShopOraclePolicy
from tests.conftest import shared_data

pytest.importorskip("rapidfuzz")
pytest.importorskip("tantivy")


def play(env: gym.Env, policy, **reset) -> dict:
    obs, info = env.reset(**reset)
    policy.reset(env, obs, info)
    for _ in range(40):
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        if terminated or truncated:
            return info
    raise AssertionError("the oracle did not finish")


@pytest.mark.parametrize("goals", ["human", "synthetic"])
def test_oracle_scores_one_on_every_shared_goal(goals):
    env = gym.make("AgentR1/WebShop-v0", source=str(shared_data("webshop")), goals=goals)
    source = env.unwrapped.catalogue.goals
    assert len(source) == {"human": 13, "synthetic": 6910}[goals]
    policy, failed = WebShopOraclePolicy(), []
    for i in range(len(source)):
        info = play(env, policy, options={"index": i})
        if not (info["success"] and info["metrics"]["score"] == 1.0 and info["reward_parts"]["outcome"] == 1.0):
            failed.append((source[i].id, info["metrics"]))
    assert failed == []


def test_oracle_scores_one_on_generated_goals():
    env = gym.make("AgentR1/WebShop-v0")
    policy = WebShopOraclePolicy()
    scores = [play(env, policy, seed=s)["metrics"]["score"] for s in range(60)]
    assert scores == [1.0] * 60


@pytest.fixture(scope="module")
def shared_env():
    return WebShopEnv(str(shared_data("webshop")), goals="human")


def test_search_results_page_and_paging(shared_env):
    env = shared_env
    obs, info = env.reset(options={"index": 2})
    assert obs.endswith(
        "WebShop [SEP] Instruction: [SEP] " + env.task.prompt + " [SEP] Search\nAvailable actions: search[<your query>]"
    )
    assert info["env"]["available_actions"] == {"has_search_bar": True, "clickables": []}
    obs, *_, info = env.step("search[Black]")
    assert " [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] " in obs
    clickables = info["env"]["available_actions"]["clickables"]
    assert clickables[:2] == ["back to search", "next >"] and len(clickables) == 2 + PRODUCT_WINDOW
    first = env.catalogue.by_asin(clickables[2])
    assert f" [SEP] {first.asin} [SEP] {first.title} [SEP] {first.price_tag}" in obs
    assert "click[" + clickables[2] + "]" in obs.splitlines()[-1]
    for page in range(2, SEARCH_RETURN_N // PRODUCT_WINDOW + 1):
        obs, *_, info = env.step("click[Next >]")
        assert f"Page {page} (Total results: 50) [SEP] < Prev" in obs
    assert "next >" not in info["env"]["available_actions"]["clickables"]
    obs, *_, info = env.step("click[< prev]")
    assert info["env"]["page_no"] == 4 and info["valid"]


def test_item_page_options_sub_pages_and_back(shared_env):
    env = shared_env
    env.reset(options={"index": 2})  # the cargo pants goal: colour and size options
    goal = env.task.meta["goal"]
    env.step(f"search[{goal.name}]")
    obs, *_, info = env.step(f"click[{goal.asin.lower()}]")
    product = env.catalogue.by_asin(goal.asin)
    assert info["env"]["page"] == "item"
    assert " [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] black [SEP] green" in obs
    assert obs.split("\n")[0].endswith(
        f"{product.title} [SEP] Price: {product.price_tag} [SEP] Rating: "
        f"{product.rating} [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    obs, *_, info = env.step("click[orange]")
    obs, *_, info = env.step("click[x-large]")
    assert info["env"]["options"] == {"color": "orange", "size": "x-large"}
    obs, *_, info = env.step("click[Features]")
    assert info["env"]["page"] == "features" and product.bullets[0] in obs
    assert info["env"]["available_actions"]["clickables"] == ["back to search", "< prev"]
    obs, *_, info = env.step("click[< prev]")
    assert info["env"]["page"] == "item" and info["env"]["options"] == {"color": "orange", "size": "x-large"}
    obs, *_, info = env.step("click[description]")
    assert product.description in obs
    env.step("click[< prev]")
    obs, *_, info = env.step("click[< prev]")
    assert info["env"]["page"] == "results"
    obs, *_, info = env.step("click[back to search]")
    assert info["env"]["page"] == "search" and obs.splitlines()[0].endswith("[SEP] Search")


def test_buy_grades_with_every_part_in_info(shared_env):
    env = shared_env
    env.reset(options={"index": 2})
    goal = env.task.meta["goal"]
    env.step(f"search[{goal.name}]")
    env.step(f"click[{goal.asin}]")
    product = env.catalogue.by_asin(goal.asin)
    wrong = next(v for v in product.option_dict["color"] if v != "orange" and not in_text(v, product))
    env.step(f"click[{wrong}]")  # the goal wants orange
    obs, reward, terminated, truncated, info = env.step("click[buy now]")
    assert terminated and not truncated and not info["success"]
    parts = info["metrics"]
    n_att, n_opt = len(goal.attributes), len(goal.goal_options)
    assert parts["r_option"] == 0.0 and parts["r_att"] == 1.0 and parts["r_type"] == 1.0
    assert reward == pytest.approx((n_att + 0 + parts["r_price"]) / (n_att + n_opt + 1)) == parts["score"]
    assert obs.startswith("Thank you for shopping with us! [SEP] Purchased [SEP] asin [SEP] " + goal.asin)
    assert info["env"]["purchased"]["options"] == {"color": wrong}
    assert info["env"]["goal"]["asin"] == goal.asin and info["env"]["goal"]["goal_options"] == {"color": "orange"}


BAD = [
    ("click[buy now]", "no item to buy"),
    ("click[b07fypsnh8]", "not a button on this page"),
    ("search[", "no command in the form"),
    ("click]x[", "brackets are malformed"),
    ("search[]", "query is empty"),
    ("look[around]", "unknown command 'look'"),
    ("", "the action is empty"),
    ('<tool_call>{"name": "buy", "arguments": {}}</tool_call>', "the tools are search"),
    ('<tool_call>{"name": "search", "arguments": {"query": 3}}</tool_call>', "the tools are search"),
    (
        '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call><tool_call>{"name": "search", '
        '"arguments": {"query": "b"}}</tool_call>',
        "one tool call per turn",
    ),
    ("<tool_call>{oops</tool_call>", "not valid JSON"),
]


@pytest.mark.parametrize(("action", "message"), BAD)
def test_bad_input_on_the_search_page_is_an_error_observation(shared_env, action, message):
    env = shared_env
    page, _ = env.reset(options={"index": 0})
    obs, reward, terminated, truncated, info = env.step(action)
    assert not info["valid"] and message in info["error"] and obs.startswith(info["error"])
    assert reward == info["reward_parts"]["format"] == -0.1 and not terminated and not truncated
    assert obs.endswith(page.split("\n\n", 1)[1])  # the page again, and the episode goes on
    assert env.step("search[protein shake]")[4]["env"]["page"] == "results"


def test_bad_input_on_the_item_page(shared_env):
    env = shared_env
    env.reset(options={"index": 1})
    goal = env.task.meta["goal"]
    env.step(f"search[{goal.name}]")
    env.step(f"click[{goal.asin}]")
    for action, message in [
        ("search[hair mask]", "only possible on the search page"),
        ("click[purple]", "not a button on this page"),
        ("click[next >]", "not a button"),
        ("click[[]]", "not a button"),
    ]:
        obs, reward, terminated, _, info = env.step(action)
        assert obs.startswith(info["error"] + "\n\nWebShop [SEP] Instruction:")
        assert message in info["error"] and reward == -0.1 and not terminated
        assert info["env"]["page"] == "item" and info["env"]["options"] == {}
    obs, *_, info = env.step('<tool_call>{"name": "click", "arguments": {"button": "120ML"}}</tool_call>')
    assert info["valid"] and info["action"]["kind"] == "tool_call" and info["env"]["options"] == {"color": "120ml"}
    assert obs.startswith("<tool_response>\nWebShop [SEP] Instruction:") and obs.endswith("\n</tool_response>")
    assert env.transcript.messages()[-1]["role"] == "tool" and env.transcript.messages()[-1]["content"].startswith(
        "WebShop"
    )
    _, reward, terminated, _, info = env.step("<think>done</think>click[Buy Now]")
    assert terminated and reward == 1.0 and info["success"]


def test_envs_share_one_catalogue_and_reject_bad_config(tmp_path):
    a, b = WebShopEnv(), gym.make("AgentR1/WebShop-v0").unwrapped
    assert a.catalogue is b.catalogue
    product = a.catalogue.products[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.catalogue.index = None  # read-only: no env can change what the others see
    with pytest.raises(dataclasses.FrozenInstanceError):
        product.price = 0.0
    with pytest.raises(UnknownOptionError):
        WebShopEnv(bogus=1)
    with pytest.raises(ConfigError, match="goals"):
        WebShopEnv(goals="human")
    with pytest.raises(DataNotFoundError, match="generated"):
        WebShopEnv(str(tmp_path / "missing"))
    (tmp_path / "items_shuffle_bad.json").write_text(json.dumps({"B000000001": {"title": "x"}}))
    with pytest.raises(DataFormatError, match="not a WebShop product file"):
        WebShopEnv(str(tmp_path / "items_shuffle_bad.json"))
    (tmp_path / "items_ins_v2_bad.json").write_text(json.dumps([1, 2]))
    with pytest.raises(DataFormatError, match="attributes"):
        WebShopEnv(str(tmp_path))


def _raw_product(asin: str, name: str, options: dict) -> dict:
    return {
        "asin": asin,
        "name": name,
        "full_description": f"{name}. Made of steel.",
        "small_description": ["Sturdy"],
        "pricing": "$12.50",
        "images": [""],
        "category": "garden",
        "query": "Tables ",
        "product_category": "Home & Kitchen › Furniture › Tables",
        "customization_options": {k: [{"value": v, "image": None} for v in vs] for k, vs in options.items()},
    }


def test_official_raw_items_shuffle_format(tmp_path):
    products = [
        _raw_product("B000000001", "Oak Side Table", {"Color": ["Walnut/Brown", "White"]}),
        _raw_product("B000000002", "Glass Coffee Table", {}),
        _raw_product("B000000001", "Duplicate", {}),
    ]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2_1000.json").write_text(
        json.dumps(
            {
                "B000000001": {
                    "attributes": ["easy assemble"],
                    "instruction": "i need a side table that is easy assemble",
                    "instruction_attributes": ["easy assemble"],
                },
                "B000000002": {"attributes": []},
            }
        )
    )
    catalogue = load_catalogue(tmp_path)
    assert len(catalogue) == 2 and catalogue.by_asin("b000000002").attributes == ("DUMMY_ATTR",)
    product = catalogue.by_asin("B000000001")
    assert product.options == (("color", ("walnut | brown", "white")),) and product.query == "tables"
    assert product.price == 12.5 and product.price_tag == "$12.5"
    texts = [catalogue.goals[i].prompt for i in range(len(catalogue.goals))]
    limit = catalogue.goals[0].meta["goal"].price_upper
    assert limit in (30.0, 40.0, 50.0)  # the larger of two of the four steps above $12.50
    assert texts == [
        f"i need a side table that is easy assemble with color: {c}, and price lower than {limit:.2f} dollars"
        for c in ("walnut | brown", "white")
    ]
    env = WebShopEnv(tmp_path)
    assert [play(env, WebShopOraclePolicy(), options={"index": i})["metrics"]["score"] for i in (0, 1)] == [1.0, 1.0]


def test_generated_catalogue_is_seeded_lazy_and_sized():
    assert generate_product(3, 17) == generate_product(3, 17) and generate_product(3, 17) != generate_product(4, 17)
    assert generate_goal(3, 1000, 5) == generate_goal(3, 1000, 5)
    assert list(iter_products(3, 300, block=64))[::37] == [generate_product(3, i) for i in range(0, 300, 37)]
    big = GeneratedProducts(0, 1_000_000)
    assert len(big) == 1_000_000 and big[-1].asin == "GS00999999" and index_of("GS00999999", 1_000_000) == 999_999
    assert index_of("GS00999999", 1000) is None and index_of("B07FYPSNH8", 1000) is None
    for bad in (0, 1_000_001, 2.5, True):
        with pytest.raises(ConfigError):
            check_size(bad)
    goal = generate_goal(0, 1000, 9)
    product = load_catalogue("generated").by_asin(goal.asin)
    assert set(goal.attributes) <= set(product.attributes) and goal.price_upper > product.price
    assert dict(goal.goal_options).keys() == product.option_dict.keys()
    assert all(v in product.option_dict[k] for k, v in goal.goal_options)
    small = WebShopEnv(num_products=50, seed=1)
    assert len(small.catalogue) == 50 and small.catalogue is not load_catalogue("generated")


def test_synthetic_goals_are_drawn_by_webshop_weight():
    env = WebShopEnv(str(shared_data("webshop")), goals="synthetic")
    goals = env.catalogue.goals
    weights = [goals[i].meta["goal"].weight for i in range(len(goals))]
    drawn = []
    for seed in range(3000):
        env.reset(seed=seed)
        drawn.append(env.task.meta["goal"].weight)
    # weighted draws favour heavy goals: the mean drawn weight is E[w^2]/E[w], well above the uniform mean E[w]
    uniform, weighted = sum(weights) / len(weights), sum(w * w for w in weights) / sum(weights)
    assert weighted > 1.5 * uniform
    assert abs(sum(drawn) / len(drawn) - weighted) < abs(sum(drawn) / len(drawn) - uniform)


def test_scripted_policy_reads_only_the_page_and_buys_validly():
    from agentgym_r1.leaderboard.baselines.webshop import RuleShopperPolicy
    from agentgym_r1.leaderboard.runner import run_episode, summarise

    env = gym.make("AgentR1/WebShop-v0", source=str(shared_data("webshop")), goals="human")
    policy = RuleShopperPolicy()
    assert not policy.is_oracle
    results = [run_episode(env, policy, seed) for seed in range(26)]
    summary = summarise(results)
    assert summary["invalid_rate"] == 0.0 and not any(r.truncated for r in results)
    assert 0.5 < sum(r.metrics["score"] for r in results) / len(results) < 1.0  # a baseline, not an oracle


def test_official_files_in_bad_shapes_raise_named_errors(tmp_path):
    bad_json = tmp_path / "a" / "documents.jsonl"
    bad_json.parent.mkdir()
    bad_json.write_text('{"id": "B1", "contents": "x", "product": {}}\n{not json\n')
    with pytest.raises(DataFormatError, match="not valid JSON lines"):
        load_catalogue(bad_json)
    malformed = tmp_path / "b" / "items_shuffle.json"
    malformed.parent.mkdir()
    malformed.write_text(json.dumps([{"asin": "B000000001", "name": "Lamp"}, {"asin": "B000000002", "title": "x"}]))
    with pytest.raises(DataFormatError, match=r"record 1 \(0-based\) is malformed"):  # the second record has no name
        load_catalogue(malformed)
    good = tmp_path / "c" / "items_shuffle.json"
    good.parent.mkdir()
    good.write_text(json.dumps([_raw_product("B000000001", "Oak Side Table", {})]))
    with pytest.raises(DataFormatError, match="no human goals"):
        load_catalogue(good, goals="human")
    with pytest.raises(DataFormatError, match="no synthetic goals"):
        load_catalogue(good)
    (good.parent / "items_human_ins.json").write_text(
        json.dumps(
            {
                "B000000001": [
                    {
                        "instruction": "i want an oak side table.",
                        "instruction_attributes": ["oak"],
                        "instruction_options": [],
                    },
                    {"instruction": "no attributes: skipped", "instruction_attributes": [], "instruction_options": []},
                ]
            }
        )
    )
    catalogue = load_catalogue(good.parent, goals="human")
    assert len(catalogue.goals) == 1 and catalogue.goals[0].prompt.startswith("i want an oak side table, and price")


def test_turn_limit_truncates_without_a_purchase():
    env = gym.make("AgentR1/WebShop-v0")
    env.reset(seed=0)
    for turn in range(15):
        _, reward, terminated, truncated, info = env.step("click[nothing]")
        assert not terminated and truncated == (turn == 14) and reward == -0.1
    assert info["episode_end"] == "turn_limit" and not info["success"] and info["metrics"]["score"] == 0.0


def test_envs_in_threads_share_the_catalogue():
    from concurrent.futures import ThreadPoolExecutor

    def worker(start: int) -> list[float]:
        env, policy = gym.make("AgentR1/WebShop-v0"), WebShopOraclePolicy()
        return [play(env, policy, seed=s)["metrics"]["score"] for s in range(start, start + 15)]

    with ThreadPoolExecutor(4) as pool:
        scores = [x for xs in pool.map(worker, range(0, 60, 15)) for x in xs]
    assert scores == [1.0] * 60
