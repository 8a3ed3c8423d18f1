"""WebShop's reward, as published in ``web_agent_site/engine/goal.py`` (``get_reward``), as pure functions.

``score = (attribute matches + option matches + price ok) / (goal attributes + goal options + 1) * r_type``

* **Attributes**: a goal attribute matches when its fuzzy token-set ratio with one of the product's attributes is
  above 85 (thefuzz's ``token_set_ratio``: lowercased, non-alphanumerics dropped, rounded to an integer), or when
  its text is found in the title, the bullet points or the description (lowercased).
* **Options**: each chosen option, colour-normalised (the first of WebShop's colour words it contains), matches a
  goal option exactly for ``size`` and by token-set ratio above 85 otherwise, or when its text is in the title,
  bullet points or description.
* **Price**: the product's price is at most the goal's limit.
* **Type** (``r_type``): 1 when the query or two product-category levels match or the title overlap is above 0.2;
  0.5 when none does; 0.1 when the title overlap is below 0.1; 0 when it is 0. The title overlap is the share of the
  goal product's title nouns found among the bought product's title nouns.

The original finds title nouns with spaCy's ``en_core_web_lg`` tagger (tokens tagged NOUN or PROPN), which cannot be
installed here. :func:`title_nouns` replaces it with a rule tokeniser: lowercased word tokens (spaCy-like splitting
of punctuation and ``'s``) minus stop words, numbers and tokens containing digits, colour and size words, and words
that a closed list or a suffix rule marks as adjectives, adverbs or verbs. Only ``r_type`` depends on it; for the
goal's own product the overlap is 1 either way. ``benchmarks/webshop_bench.py`` measures how often it agrees with
the other choices on the shared goals (see ``benchmarks/reports/env_speed.md``).

Two departures, both at the edges: the option share and the total are clipped to at most 1 (the original can count
more option matches than goal options when extra options are chosen whose text is in the description, giving a
score above 1), and a goal with no options has ``r_option = 1`` in the metrics (the original leaves it out).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_r1.envs.webshop.catalogue import Goal, Product
from agentgym_r1.error import require

EXACT_MATCH_OPTS = ("size",)
FUZZY_THRESHOLD = 85


# WebShop's colour words (web_agent_site/engine/normalize.py COLOR_SET), in its order: the first contained wins.
def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


COLOR_SET = _words(
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy camel "
    "camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral cranberry cream "
    "crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass gray green grey heather "
    "indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight mint mocha "
    "multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple rainbow red rose royal "
    "rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise "
    "violet walnut wheat white wine yellow"
)

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def normalize_color(text: str) -> str:
    """The first WebShop colour word contained in ``text``, else ``text`` unchanged."""
    for color in COLOR_SET:
        if color in text:
            return color
    return text


def _process(text: str) -> str:
    """thefuzz's default processing: ASCII only, lowercase, non-alphanumerics to spaces, trimmed."""
    return _NON_ALNUM.sub(" ", text.encode("ascii", "ignore").decode().lower()).strip()


@functools.cache
def _fuzz() -> Any:
    return require("rapidfuzz.fuzz", "webshop", "WebShop's reward (fuzzy attribute and option matching)")


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``fuzz.token_set_ratio`` (0 to 100, rounded), computed with rapidfuzz."""
    a, b = _process(a), _process(b)
    if not a or not b:
        return 0
    return round(_fuzz().token_set_ratio(a, b))


def in_text(needle: str, product: Product) -> bool:
    """Whether ``needle`` occurs in the product's title, bullet points or description (lowercased)."""
    return (
        needle in product.title.lower()
        or needle in " ".join(product.bullets).lower()
        or needle in product.description.lower()
    )


# -- type reward ----------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"[a-z0-9]+(?:\.[0-9]+)*|'s|[^\sa-z0-9]")  # spaCy-like: hyphens and 's split off
_STOP = frozenset(
    _words(
        "a about above after again against all am an and any are as at be because been before being below between both "
        "but by can could did do does doing down during each few for from further had has have having he her here hers "
        "him his how i if in into is it its itself just me more most my no nor not now of off on once only or other "
        "our out over own same she should so some such than that the their them then there these they this those "
        "through to too under until up very was we were what when where which while who whom why will with you your "
        "yours 's s per x w"
    )
)
_NOT_NOUNS = frozenset(
    _words(
        "new natural organic free large small medium big mini extra super ultra soft hard high low long short wide "
        "thin thick heavy light dry wet fresh pure premium professional portable wireless compatible adjustable "
        "waterproof durable reusable washable cute classic modern vintage casual comfortable comfy warm cool hot cold "
        "best great good perfect easy quick fast slim full half double single multi multiple universal "
        "original real genuine authentic deluxe unisex elegant beautiful luxury sturdy strong safe clean clear "
        "sweet spicy sour salty rich smooth gentle sensitive oily fine non anti quality handmade vegan "
        "gluten electric digital smart automatic manual rechargeable foldable stainless solid flexible lightweight "
        "made fit fits fitting use used using includes including make makes keep keeps compatible "
        "xl xxl xs s m l xx-large x-large x-small one"
    )
)
_ADJ_SUFFIX = re.compile(r".{3,}(?:ous|ful|less|able|ible|ive|ly|ish|ical|ed|ing)$")


def tokens(title: str) -> list[str]:
    """Lowercased tokens, split as spaCy's English tokenizer mostly does (see ``benchmarks/reports/env_speed.md``)."""
    return _TOKEN.findall(title.lower())


def noun_filter(toks: Iterable[str]) -> list[str]:
    """The tokens that are probably nouns: not stop words, numbers, colours, sizes or adjective-like words."""
    out = []
    for tok in toks:
        if not tok[:1].isalpha() or any(c.isdigit() for c in tok) or tok in _STOP or tok in _NOT_NOUNS:
            continue
        if tok in COLOR_SET or _ADJ_SUFFIX.fullmatch(tok):
            continue
        out.append(tok)
    return out


def title_nouns(title: str) -> list[str]:
    """The title's probable nouns (lowercased): what spaCy's NOUN/PROPN tags give in the original."""
    return noun_filter(tokens(title))


@dataclass(frozen=True, slots=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal, nouns=title_nouns) -> TypeReward:
    """WebShop's ``get_type_reward``: is the bought product the same kind of product as the goal's?"""
    query_match = product.query == goal.query
    levels = {x.strip() for x in product.product_category.split("›")}
    category_match = len(levels & {x.strip() for x in goal.product_category.split("›")}) >= 2
    bought, desired = nouns(product.title), nouns(goal.name)
    title_score = 0.2 if not desired else len(set(bought) & set(desired)) / len(desired)
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


# -- attribute, option and price rewards ----------------------------------------------------------------------------
def attribute_matches(product: Product, goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has (fuzzy match with its attributes, or found in its text)."""
    n = 0
    for g in goal_attributes:
        if any(token_set_ratio(p, g) > FUZZY_THRESHOLD for p in product.attributes) or in_text(g, product):
            n += 1
    return n


def option_matches(product: Product, goal_options: Sequence[str], chosen: dict[str, str]) -> int:
    """How many chosen options match a goal option (``size`` exactly, others fuzzily) or the product's text."""
    goal_values = [normalize_color(o) for o in goal_options]
    n = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTS:
            matched = value in goal_values
        else:
            matched = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in goal_values)
        if matched or in_text(value, product):
            n += 1
    return n


METRIC_KEYS = (
    "score",
    "r_type",
    "r_att",
    "r_option",
    "r_price",
    "query_match",
    "category_match",
    "title_score",
    "w_att",
    "w_option",
    "w_price",
)


def get_reward(product: Product, goal: Goal, chosen: dict[str, str], price: float | None = None) -> dict[str, float]:
    """The score in [0, 1] and its parts (:data:`METRIC_KEYS`), for buying ``product`` with ``chosen`` options."""
    t = type_reward(product, goal)
    price = product.price if price is None else price
    r_price = float(price <= goal.price_upper) if goal.price_upper > 0 else 0.0
    n_att = attribute_matches(product, goal.attributes)
    goal_values = goal.option_values
    n_opt = min(option_matches(product, goal_values, chosen), len(goal_values))
    total = len(goal.attributes) + len(goal_values) + 1
    score = min(1.0, (n_att + n_opt + r_price) / total * t.r_type)
    return {
        "score": score,
        "r_type": t.r_type,
        "r_att": n_att / len(goal.attributes) if goal.attributes else 1.0,
        "r_option": n_opt / len(goal_values) if goal_values else 1.0,
        "r_price": r_price,
        "query_match": float(t.query_match),
        "category_match": float(t.category_match),
        "title_score": t.title_score,
        "w_att": len(goal.attributes) / total,
        "w_option": len(goal_values) / total,
        "w_price": 1 / total,
    }
