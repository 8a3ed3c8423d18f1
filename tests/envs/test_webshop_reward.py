"""WebShop's reward on hand-built cases, one table per part, and the total."""

from __future__ import annotations

import pytest

from agentgym_r1.envs.webshop.catalogue import Goal, Product
from agentgym_r1.envs.webshop.reward import (
    attribute_matches,
    get_reward,
    normalize_color,
    option_matches,
    title_nouns,
    token_set_ratio,
    type_reward,
)

pytest.importorskip("rapidfuzz")

PATH = "Clothing, Shoes & Jewelry › Men › Shoes › Loafers & Slip-Ons"


def product(**kw) -> Product:
    base = dict(
        asin="B000000001",
        title="Penny Loafers Rubber Sole Driving Shoes",
        price=40.0,
        price_tag="$40.0",
        category="fashion",
        query="men's loafers",
        product_category=PATH,
        description="Soft leather upper. Machine wash cold.",
        bullets=("Imported", "Cushioned insole"),
        attributes=("rubber sole", "leather sole"),
        options=(("color", ("black1901", "brown", "navy blue")), ("size", ("9", "10.5", "x-large"))),
    )
    return Product(**{**base, **kw})


def goal(**kw) -> Goal:
    base = dict(
        asin="B000000001",
        instruction_text="i want loafers",
        attributes=("rubber sole",),
        goal_options=(("color", "black1901"), ("size", "10.5")),
        price_upper=50.0,
        category="fashion",
        query="men's loafers",
        name="Penny Loafers Rubber Sole Driving Shoes",
        product_category=PATH,
    )
    return Goal(**{**base, **kw})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("black forest", "black"),
        ("violet lavender", "lavender"),
        ("steelivy fuchsia", "fuchsia"),
        ("123alabaster", "alabaster"),
        ("webshop", "webshop"),
        ("navy blue", "blue"),
        ("10.5", "10.5"),
    ],
)
def test_normalize_color_takes_the_first_colour_word_in_webshop_order(text, expected):
    assert normalize_color(text) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("gluten-free", "gluten free", 100),
        ("Easy Install", "easy to install", 100),
        ("sugar free", "gluten free", 57),
        ("", "anything", 0),
        ("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear", 100),
    ],
)
def test_token_set_ratio_is_thefuzz_processed_and_rounded(a, b, expected):
    assert token_set_ratio(a, b) == expected


@pytest.mark.parametrize(
    ("goal_attrs", "kw", "expected"),
    [
        (("rubber sole",), {}, 1),  # in the attributes
        (("rubber soles",), {"title": "Loafers"}, 1),  # fuzzy with "rubber sole": 96 > 85
        (("sugar free",), {"attributes": ("gluten free",)}, 0),  # fuzzy 57: no
        (("machine wash",), {"attributes": ()}, 1),  # in the description
        (("cushioned insole",), {"attributes": ()}, 1),  # in a bullet point
        (("driving shoes",), {"attributes": ()}, 1),  # in the title
        (("memory foam", "rubber sole", "arch support"), {}, 1),
    ],
)
def test_attribute_matches(goal_attrs, kw, expected):
    assert attribute_matches(product(**kw), goal_attrs) == expected


@pytest.mark.parametrize(
    ("goal_opts", "chosen", "expected"),
    [
        (["black1901", "10.5"], {"color": "black1901", "size": "10.5"}, 2),
        (["black"], {"color": "black1901"}, 1),  # colour normalisation: both are "black"
        (["navy"], {"color": "navy blue"}, 0),  # "navy blue" normalises to "blue", "navy" stays: as in the original
        (["large"], {"size": "x-large"}, 0),  # size needs an exact match
        (["x-large"], {"size": "x-large"}, 1),
        (["brown"], {"color": "black1901"}, 0),
        (["brown"], {"color": "soft"}, 1),  # a chosen option found in the product's text counts
        ([], {}, 0),
    ],
)
def test_option_matches(goal_opts, chosen, expected):
    assert option_matches(product(), goal_opts, chosen) == expected


SHOES = "Penny Loafers Rubber Sole Shoes"  # five nouns
ELEVEN = "Penny Loafers Rubber Sole Shoes Boots Laces Socks Insoles Heels Straps"


@pytest.mark.parametrize(
    ("goal_name", "kw", "expected"),
    [
        (SHOES, {"title": SHOES}, (1.0, True, True, 1.0)),
        (SHOES, {"title": "Loafers Rubber Shoes", "query": "x", "product_category": "Toys"}, (1.0, False, False, 0.6)),
        (SHOES, {"title": "Penny Coin Bank", "query": "x", "product_category": "Toys"}, (0.5, False, False, 0.2)),
        (SHOES, {"title": "Penny Coin Bank", "query": "x"}, (1.0, False, True, 0.2)),  # two category levels shared
        (SHOES, {"title": "Penny Coin Bank", "product_category": "Toys"}, (1.0, True, False, 0.2)),  # query matches
        (SHOES, {"title": "Plastic Bank"}, (0.0, True, True, 0.0)),  # no title overlap: 0 even if the rest matches
        (ELEVEN, {"title": "Penny Bank"}, (0.1, True, True, 1 / 11)),  # overlap under 0.1: 0.1
        (ELEVEN, {"title": "Penny Loafers Bank"}, (1.0, True, True, 2 / 11)),
        (
            ELEVEN,
            {"title": "Penny Loafers Bank", "query": "x", "product_category": "Toys"},
            (0.5, False, False, 2 / 11),
        ),
    ],
)
def test_type_reward(goal_name, kw, expected):
    t = type_reward(product(**kw), goal(name=goal_name))
    assert (t.r_type, t.query_match, t.category_match) == expected[:3]
    assert t.title_score == pytest.approx(expected[3])


def test_type_reward_without_goal_nouns_uses_a_title_score_of_0_2():
    t = type_reward(product(query="x", product_category="Toys"), goal(name="The Best 2 For 1"))
    assert t.title_score == 0.2 and t.r_type == 0.5


def test_title_nouns_drop_stop_words_numbers_colours_and_adjectives():
    assert title_nouns("Blue Diamond Almonds, Pecan, 4.25 Ounce (Pack of 12)") == [
        "diamond",
        "almonds",
        "pecan",
        "ounce",
        "pack",
    ]
    assert title_nouns("Men's Slip-on Loafers") == ["men", "slip", "loafers"]
    assert title_nouns("Portable Wireless Rechargeable") == []


@pytest.mark.parametrize(
    ("kw", "chosen", "price", "score"),
    [
        ({}, {"color": "black1901", "size": "10.5"}, 40.0, 1.0),
        ({}, {"color": "black1901", "size": "10.5"}, 60.0, 3 / 4),  # over the price limit
        ({}, {"color": "brown", "size": "10.5"}, 40.0, 3 / 4),  # one option wrong
        ({}, {}, 40.0, 2 / 4),  # no options chosen
        (
            {"attributes": ("rubber sole", "arch support", "memory foam")},
            {"color": "black1901", "size": "10.5"},
            40.0,
            4 / 6,
        ),
        ({"goal_options": ()}, {}, 40.0, 1.0),
        ({"goal_options": ()}, {"color": "soft"}, 40.0, 1.0),  # extra matches never push the score over 1
    ],
)
def test_total_score(kw, chosen, price, score):
    g = goal(**kw)
    parts = get_reward(product(), g, chosen, price=price)
    assert parts["score"] == pytest.approx(score)
    total = len(g.attributes) + len(g.goal_options) + 1
    assert parts["w_att"] + parts["w_option"] + parts["w_price"] == pytest.approx(1.0)
    assert parts["w_price"] == pytest.approx(1 / total)
    assert parts["r_price"] == float(price <= 50.0)


def test_total_score_is_scaled_by_the_type_factor():
    parts = get_reward(
        product(title="Penny Coin Bank", query="x", product_category="Toys"),
        goal(name=SHOES),
        {"color": "black1901", "size": "10.5"},
    )  # the attributes are in the product's attributes
    assert parts["r_type"] == 0.5 and parts["score"] == pytest.approx(0.5 * 4 / 4)
