"""Difficulty levels of WebShop's generated goals: pinned texts, solvable goals, named errors."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_r1  # noqa: F401
from agentgym_r1.envs.webshop.generator import LEVELS, generate_goal, generate_product
from agentgym_r1.error import ConfigError

PINNED = {
    ("easy", 0): "i want to buy a makeup brush set which is sulfate free, hair growth and anti aging with scent: "
    "coconut, and price lower than 90.00 dollars",
    ("medium", 0): "i want to buy a makeup brush set; long lasting, sulfate free, hair growth and fights wrinkles "
    "with scent: vanilla, and price lower than 80.00 dollars",
    ("hard", 1): "show me a trainers, with rubber soles, with a stretchy waistband and with long sleeves with size: "
    "s, and price lower than 120.00 dollars",
}


@pytest.mark.parametrize(("level", "index"), list(PINNED))
def test_the_same_seed_and_level_give_the_same_instruction(level, index):
    assert generate_goal(0, 1000, index, LEVELS[level]).instruction_text == PINNED[(level, index)]


def test_easy_is_the_default_and_unchanged():
    assert generate_goal(0, 1000, 3) == generate_goal(0, 1000, 3, LEVELS["easy"])
    env = gym.make("AgentR1/WebShop-v0")
    assert env.reset(seed=0)[1]["env"]["difficulty"] == "easy"


@pytest.mark.parametrize("level", list(LEVELS))
def test_every_goal_is_one_products_own_attributes_options_and_price(level):
    knobs = LEVELS[level]
    for i in range(200):
        goal = generate_goal(2, 1000, i, knobs)
        product = generate_product(2, int(goal.asin[2:]))
        assert set(goal.attributes) <= set(product.attributes)
        assert min(knobs.min_attributes, len(product.attributes)) <= len(goal.attributes) <= knobs.max_attributes
        assert all(v in product.option_dict[n] for n, v in goal.goal_options)
        assert product.price <= goal.price_upper


def test_hard_goals_are_written_in_other_words_with_tight_prices():
    hard = [generate_goal(0, 1000, i, LEVELS["hard"]) for i in range(100)]
    literal = sum(all(a in g.instruction_text for a in g.attributes) for g in hard)
    assert literal < 20  # most goals name some attribute in a person's words
    product_prices = [generate_product(0, int(g.asin[2:])).price for g in hard if g.price_upper < 1e6]
    assert all(
        upper - price <= 10.0
        for upper, price in zip([g.price_upper for g in hard if g.price_upper < 1e6], product_prices, strict=True)
    )


def test_a_level_is_recorded_and_shares_the_catalogue():
    easy = gym.make("AgentR1/WebShop-v0").unwrapped
    hard = gym.make("AgentR1/WebShop-v0", difficulty="hard").unwrapped
    assert hard.catalogue.index is easy.catalogue.index  # one search index per catalogue, whatever the level
    assert hard.reset(seed=0)[1]["env"]["difficulty"] == "hard"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"difficulty": "expert"}, r"unknown difficulty 'expert'.*\['easy', 'medium', 'hard'\]"),
        ({"difficulty": {"paraphrases": 1}}, r"unknown difficulty knob\(s\) \['paraphrases'\]"),
        (
            {"difficulty": {"min_attributes": 4, "max_attributes": 3}},
            r"min_attributes \(4\) is more than max_attributes",
        ),
        ({"difficulty": {"max_attributes": 6}}, r"max_attributes must be an int in \[1, 5\]"),
        ({"difficulty": {"tight_price": -0.1}}, r"tight_price must be a number in \[0, 1\]"),
    ],
)
def test_bad_difficulty_is_a_named_error_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        gym.make("AgentR1/WebShop-v0", **kwargs)
