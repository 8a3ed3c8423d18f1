"""A procedural catalogue: products and instruction goals in WebShop's shapes, seeded, from 1k to 1M products.

Every product and every goal is a pure function of ``(seed, size, index)``: products are made on demand (a small
cache keeps the ones in use), so the catalogue costs only its search index in memory. Five top categories as in
WebShop (beauty, electronics, fashion, garden, grocery), each with product types, attributes, option kinds and
price ranges. Products come in families of four near duplicates (same type, brand and kinds of options; each
lacks one of the family's attributes or not, and has its own option values, price and model code), as sellers
list variants on Amazon. A goal picks a product, two or three of its attributes, one value of each of its options
and a price limit (WebShop's rule), and writes an instruction such as "i am looking for a lipstick that is long
lasting and cruelty free with color: ruby red, and price lower than 30.00 dollars".

Difficulty (:class:`Knobs`, levels in :data:`LEVELS`): more attributes to match (siblings each lack one, so more
attributes rule out more near duplicates), the product type, attributes and options written as a person would
("sun cream", "not tested on animals", "3.4 ounce") instead of the catalogue's words (search and string matching no
longer single out the product among its siblings), and a price limit at the first step above the price. ``easy`` is the
original generator, draw for draw. Every goal stays solvable: it is made from one product's own attributes, options and
price.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from agentgym_r1.core.difficulty import check_int, check_order, check_rate
from agentgym_r1.core.tasks import GeneratedSource, Task
from agentgym_r1.envs.webshop.catalogue import Goal, Product, Review, price_limit
from agentgym_r1.error import ConfigError

MIN_SIZE, MAX_SIZE = 1, 1_000_000

# top category -> (amazon path, product types, attributes, {option name: values}, (low, high) price)
CATEGORIES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], dict[str, tuple[str, ...]], tuple[float, float]]] = {
    "beauty": (
        "Beauty & Personal Care",
        (
            "shampoo",
            "conditioner",
            "lipstick",
            "face serum",
            "body lotion",
            "nail polish",
            "eye shadow palette",
            "hair mask",
            "deodorant",
            "sunscreen",
            "makeup brush set",
        ),
        (
            "long lasting",
            "cruelty free",
            "paraben free",
            "sulfate free",
            "travel size",
            "dry skin",
            "sensitive skin",
            "natural ingredients",
            "easy apply",
            "hair growth",
            "tea tree",
            "anti aging",
            "fragrance free",
        ),
        {
            "color": ("ruby red", "nude beige", "coral pink", "plum", "black", "rose gold"),
            "size": ("1.7 fl oz", "3.4 fl oz", "8 fl oz (pack of 1)", "16 fl oz (pack of 2)"),
            "scent": ("lavender", "vanilla", "fresh", "coconut", "unscented"),
        },
        (4.0, 80.0),
    ),
    "electronics": (
        "Electronics",
        (
            "bluetooth speaker",
            "wireless earbuds",
            "usb cable",
            "phone case",
            "hdmi adapter",
            "power bank",
            "gaming mouse",
            "keyboard",
            "webcam",
            "smart watch band",
            "tablet stand",
        ),
        (
            "fast charging",
            "noise cancelling",
            "high speed",
            "easy install",
            "water resistant",
            "long battery life",
            "plug play",
            "heavy duty",
            "hands free",
            "high definition",
            "aluminum alloy",
            "usb port",
        ),
        {
            "color": ("black", "white", "silver", "space gray", "navy blue", "red"),
            "style": ("basic", "pro", "with charger", "2 pack"),
            "capacity": ("10000mah", "20000mah", "32gb", "64gb"),
        },
        (6.0, 300.0),
    ),
    "fashion": (
        "Clothing, Shoes & Jewelry",
        (
            "t-shirt",
            "hoodie",
            "jeans",
            "sneakers",
            "sandals",
            "dress",
            "jacket",
            "socks",
            "leggings",
            "loafers",
            "cargo pants",
            "backpack",
        ),
        (
            "machine wash",
            "relaxed fit",
            "rubber sole",
            "slim fit",
            "button closure",
            "everyday wear",
            "cotton spandex",
            "elastic waist",
            "long sleeve",
            "winter warm",
            "drawstring closure",
            "quick drying",
        ),
        {
            "color": ("black", "heather grey", "navy", "olive green", "burgundy", "white", "khaki"),
            "size": ("small", "medium", "large", "x-large", "xx-large", "7.5", "9", "10.5"),
        },
        (9.0, 150.0),
    ),
    "garden": (
        "Home & Kitchen",
        (
            "storage ottoman",
            "console table",
            "throw pillow cover",
            "shower curtain",
            "wall clock",
            "bed sheet set",
            "desk lamp",
            "area rug",
            "bookshelf",
            "garden hose",
            "planter pot",
        ),
        (
            "easy clean",
            "easy assemble",
            "solid wood",
            "faux leather",
            "living room",
            "space saving",
            "heavy duty",
            "stainless steel",
            "non slip",
            "mid century",
            "king size",
            "eco friendly",
        ),
        {
            "color": ("walnut", "white", "grey", "natural", "espresso", "teal"),
            "size": ("60x40x40cm", "18 x 18 inch", "queen", "king", "5 ft x 7 ft", "small"),
        },
        (12.0, 900.0),
    ),
    "grocery": (
        "Grocery & Gourmet Food",
        (
            "almonds",
            "protein shake",
            "green tea",
            "coffee beans",
            "granola bars",
            "hot sauce",
            "olive oil",
            "dark chocolate",
            "trail mix",
            "beef jerky",
        ),
        (
            "gluten free",
            "non gmo",
            "low sugar",
            "plant based",
            "sugar free",
            "keto friendly",
            "dairy free",
            "high protein",
            "usda organic",
            "ready eat",
            "artificial flavors",
            "shelf stable",
        ),
        {
            "flavor name": ("pecan", "sea salt", "honey roasted", "original", "vanilla", "spicy"),
            "size": ("4.25 ounce (pack of 1)", "12 ounce (pack of 2)", "1 pound", "pack of 12"),
        },
        (3.0, 60.0),
    ),
}
TOP = tuple(sorted(CATEGORIES))
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ve",
    "tor",
    "zen",
    "qua",
    "ri",
    "sol",
    "bel",
    "nox",
    "dra",
    "fin",
    "ar",
    "lux",
    "pe",
    "vo",
    "sta",
    "mor",
    "ix",
)
_ADJS = ("premium", "classic", "deluxe", "everyday", "essential", "ultra", "signature", "original")
_TEMPLATES = (
    "i am looking for {art} {type} that is {attrs}",
    "i need {art} {attrs} {type}",
    "find me {attrs} {type}",
    "i want to buy {art} {type} which is {attrs}",
    "show me {art} {attrs} {type}",
)
# Templates for goals written as a person would (harder levels): the type first, then what it should be.
_SAID_TEMPLATES = (
    "i am looking for {art} {type}: {attrs}",
    "i need {art} {type}, {attrs}",
    "find me {art} {type}, {attrs}",
    "i want to buy {art} {type}; {attrs}",
    "show me {art} {type}, {attrs}",
)
_REVIEWS = (
    ("Works as described", "5", "Exactly what I needed, good value."),
    ("Okay", "3", "Does the job but the quality could be better."),
    ("Love it", "5", "Bought a second one for a friend."),
    ("Not for me", "2", "Smaller than I expected."),
)


# How a person writes an attribute or an option value (harder levels); anything not here is written as it is.
SAID: dict[str, str] = {
    "long lasting": "lasts all day",
    "cruelty free": "not tested on animals",
    "paraben free": "without parabens",
    "sulfate free": "with no sulfates",
    "travel size": "small enough for travel",
    "dry skin": "good for dry skin",
    "sensitive skin": "gentle on sensitive skin",
    "natural ingredients": "made from natural stuff",
    "easy apply": "goes on easily",
    "hair growth": "helps hair grow",
    "anti aging": "fights wrinkles",
    "fragrance free": "with no perfume",
    "fast charging": "charges quickly",
    "noise cancelling": "blocks out noise",
    "high speed": "really fast",
    "easy install": "simple to set up",
    "water resistant": "ok in the rain",
    "long battery life": "with a battery that lasts",
    "plug play": "works right out of the box",
    "heavy duty": "built to take abuse",
    "hands free": "usable without hands",
    "high definition": "in hd",
    "aluminum alloy": "with a metal body",
    "usb port": "with a usb socket",
    "machine wash": "washable in the machine",
    "relaxed fit": "loose fitting",
    "rubber sole": "with rubber soles",
    "slim fit": "tight fitting",
    "button closure": "that buttons up",
    "everyday wear": "for every day",
    "cotton spandex": "stretchy cotton",
    "elastic waist": "with a stretchy waistband",
    "long sleeve": "with long sleeves",
    "winter warm": "warm for winter",
    "drawstring closure": "with a drawstring",
    "quick drying": "that dries fast",
    "easy clean": "easy to wipe down",
    "easy assemble": "simple to put together",
    "solid wood": "made of real wood",
    "faux leather": "vegan leather",
    "living room": "for the lounge",
    "space saving": "compact",
    "stainless steel": "rust proof steel",
    "non slip": "that won't slide",
    "mid century": "retro styled",
    "king size": "big enough for a king bed",
    "eco friendly": "kind to the planet",
    "gluten free": "with no gluten",
    "non gmo": "not genetically modified",
    "low sugar": "not too sweet",
    "plant based": "vegan",
    "sugar free": "with zero sugar",
    "keto friendly": "ok on keto",
    "dairy free": "with no milk",
    "high protein": "packed with protein",
    "usda organic": "certified organic",
    "ready eat": "that needs no cooking",
    "artificial flavors": "with added flavouring",
    "shelf stable": "that keeps without a fridge",
    "1.7 fl oz": "1.7 ounce",
    "3.4 fl oz": "3.4 ounce",
    "8 fl oz (pack of 1)": "single 8 ounce",
    "16 fl oz (pack of 2)": "two 16 ounce bottles",
    "small": "s",
    "medium": "m",
    "large": "l",
    "x-large": "xl",
    "xx-large": "xxl",
    "10000mah": "10,000 mah",
    "20000mah": "20,000 mah",
    "32gb": "32 gigabyte",
    "64gb": "64 gigabyte",
    "2 pack": "pair",
    "with charger": "charger included",
    "basic": "entry level",
    "pro": "professional",
    "60x40x40cm": "60 by 40 by 40 cm",
    "18 x 18 inch": "18 inch square",
    "5 ft x 7 ft": "5 by 7 feet",
    "4.25 ounce (pack of 1)": "single 4.25 oz",
    "12 ounce (pack of 2)": "two 12 oz",
    "1 pound": "16 oz",
    "pack of 12": "twelve pack",
    "sea salt": "salted",
    "honey roasted": "honey glazed",
    "original": "classic",
    "spicy": "hot",
    "unscented": "no scent",
    "space gray": "space grey",
    "heather grey": "heather gray",
    "navy blue": "dark blue",
    "olive green": "olive coloured",
    "nude beige": "beige nude",
    "coral pink": "pinkish coral",
    "rose gold": "pink gold",
    # product types
    "shampoo": "hair wash",
    "conditioner": "hair softener",
    "lipstick": "lip colour",
    "face serum": "facial oil",
    "body lotion": "skin moisturiser",
    "nail polish": "nail varnish",
    "eye shadow palette": "eye makeup kit",
    "hair mask": "deep hair treatment",
    "deodorant": "antiperspirant",
    "sunscreen": "sun cream",
    "makeup brush set": "set of cosmetic brushes",
    "bluetooth speaker": "portable wireless loudspeaker",
    "wireless earbuds": "cordless in-ear headphones",
    "usb cable": "charging cord",
    "phone case": "cover for my phone",
    "hdmi adapter": "video dongle",
    "power bank": "portable charger",
    "gaming mouse": "mouse for games",
    "keyboard": "typing board",
    "webcam": "computer camera",
    "smart watch band": "strap for my smartwatch",
    "tablet stand": "holder for my tablet",
    "t-shirt": "tee",
    "hoodie": "hooded sweatshirt",
    "jeans": "denim trousers",
    "sneakers": "trainers",
    "sandals": "open shoes",
    "dress": "frock",
    "jacket": "coat",
    "socks": "pairs of hosiery",
    "leggings": "tights",
    "loafers": "slip-on shoes",
    "cargo pants": "utility trousers",
    "backpack": "rucksack",
    "storage ottoman": "footstool with storage",
    "console table": "hallway table",
    "throw pillow cover": "cushion case",
    "shower curtain": "bath curtain",
    "wall clock": "clock to hang",
    "bed sheet set": "set of bedding",
    "desk lamp": "reading light",
    "area rug": "floor carpet",
    "bookshelf": "book case",
    "garden hose": "watering pipe",
    "planter pot": "flower pot",
    "almonds": "nuts",
    "protein shake": "protein drink",
    "green tea": "matcha",
    "coffee beans": "whole bean coffee",
    "granola bars": "muesli bars",
    "hot sauce": "chilli sauce",
    "olive oil": "cooking oil from olives",
    "dark chocolate": "bittersweet chocolate",
    "trail mix": "nut and fruit snack mix",
    "beef jerky": "dried meat",
}


@dataclass(frozen=True)
class Knobs:
    """What makes a generated goal harder. ``min_attributes``/``max_attributes``: goal attributes (at most the
    product's); ``paraphrase``: the chance each attribute and option is written as a person would; ``tight_price``:
    the chance that the price limit is the first step above the price (WebShop's rule takes the larger of two of
    the four steps above it)."""

    min_attributes: int = 2
    max_attributes: int = 3
    paraphrase: float = 0.0
    tight_price: float = 0.0

    def __post_init__(self) -> None:
        for name in ("min_attributes", "max_attributes"):
            check_int("WebShop generated", name, getattr(self, name), 1, MAX_GOAL_ATTRIBUTES)
        check_order("min_attributes", self.min_attributes, "max_attributes", self.max_attributes)
        check_rate("WebShop generated", "paraphrase", self.paraphrase)
        check_rate("WebShop generated", "tight_price", self.tight_price)


MAX_GOAL_ATTRIBUTES = 5  # a family has at most 5 attributes
LEVELS = {
    "easy": Knobs(),
    "medium": Knobs(min_attributes=2, max_attributes=4, paraphrase=0.3, tight_price=0.5),
    "hard": Knobs(min_attributes=3, max_attributes=5, paraphrase=1.0, tight_price=1.0),
}


def check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
        raise ConfigError(f"num_products must be an int in [{MIN_SIZE}, {MAX_SIZE}], got {size!r}")
    return size


def asin_of(index: int) -> str:
    return f"GS{index:08d}"


def index_of(asin: str, size: int) -> int | None:
    """The index of a generated ASIN (``GS`` + 8 digits) in a catalogue of ``size``, else ``None``."""
    if len(asin) != 10 or not asin.startswith("GS") or not asin[2:].isdigit():
        return None
    i = int(asin[2:])
    return i if i < size else None


def _pick(rng: np.random.Generator, items: Sequence[str], lo: int, hi: int) -> tuple[str, ...]:
    n = int(rng.integers(lo, min(hi, len(items)) + 1))
    return tuple(items[i] for i in sorted(rng.choice(len(items), size=n, replace=False)))


DRAWS_PER_PRODUCT = 64  # uniforms each product consumes from the catalogue's stream (it uses fewer)
HALF = DRAWS_PER_PRODUCT // 2  # the first half of a family leader's draws are the family's, the second its own
FAMILY = 4  # products 4k .. 4k+3 are siblings: same type, brand and kinds of options


class _Draws:
    """The uniforms of one product: a fixed slice of the catalogue's PCG64 stream, read in order."""

    __slots__ = ("i", "u")

    def __init__(self, u: list[float]) -> None:
        self.u, self.i = u, 0

    def uniform(self) -> float:
        self.i += 1
        return self.u[self.i - 1]

    def int(self, n: int) -> int:
        return min(int(self.uniform() * n), n - 1)

    def pick(self, items: Sequence, lo: int, hi: int) -> tuple:
        """``lo`` to ``hi`` distinct items, in their original order (a partial Fisher-Yates shuffle)."""
        k = lo + self.int(min(hi, len(items)) - lo + 1)
        idx = list(range(len(items)))
        for j in range(k):
            r = j + self.int(len(idx) - j)
            idx[j], idx[r] = idx[r], idx[j]
        return tuple(items[i] for i in sorted(idx[:k]))


_STREAMS: dict[int, tuple[np.random.PCG64, np.random.Generator, dict]] = {}
_STREAM_LOCK = threading.Lock()


def _product_draws(seed: int, index: int) -> list[float]:
    """Product ``index``'s uniforms: the PCG64 stream seeded by ``seed``, advanced to the product's slice."""
    with _STREAM_LOCK:
        if seed not in _STREAMS:
            bit = np.random.PCG64(seed)
            _STREAMS[seed] = (bit, np.random.Generator(bit), bit.state)
        bit, gen, start = _STREAMS[seed]
        bit.state = start
        bit.advance(DRAWS_PER_PRODUCT * index)
        return gen.random(DRAWS_PER_PRODUCT).tolist()


def iter_products(seed: int, size: int, block: int = 4096) -> Iterator[Product]:
    """Products ``0 .. size-1`` in order, drawn from the stream in blocks (fast, for building the index)."""
    assert block % FAMILY == 0
    gen = np.random.Generator(np.random.PCG64(seed))
    for start in range(0, size, block):
        rows = gen.random((min(block, size - start), DRAWS_PER_PRODUCT)).tolist()
        for offset, row in enumerate(rows):
            leader = rows[offset - offset % FAMILY]
            yield build_product(start + offset, _Draws(leader[:HALF]), _Draws(row[HALF:]))


@functools.lru_cache(maxsize=8192)
def generate_product(seed: int, index: int) -> Product:
    """Product ``index`` of the catalogue seeded by ``seed`` (the same for any catalogue size)."""
    own = _product_draws(seed, index)
    leader = own if index % FAMILY == 0 else _product_draws(seed, index - index % FAMILY)
    return build_product(index, _Draws(leader[:HALF]), _Draws(own[HALF:]))


def build_product(index: int, family: _Draws, d: _Draws) -> Product:
    """A product from its family's draws (category, type, brand, attributes, option kinds, base price) and its
    own (which attribute it lacks, model, option values, price): siblings are near duplicates, as on Amazon."""
    top = TOP[family.int(len(TOP))]
    path, types, attr_pool, option_pool, (low, high) = CATEGORIES[top]
    kind = types[family.int(len(types))]
    brand = (_SYLLABLES[family.int(len(_SYLLABLES))] + _SYLLABLES[family.int(len(_SYLLABLES))]).capitalize()
    attributes = family.pick(attr_pool, 3, 5)
    adj = _ADJS[family.int(len(_ADJS))]
    names = family.pick(sorted(option_pool), 0, 2)
    base = low * math.exp(family.uniform() * math.log(high / low))  # log-uniform
    if d.uniform() < 0.75:  # most siblings lack one of the family's attributes
        lacking = d.int(len(attributes))
        attributes = attributes[:lacking] + attributes[lacking + 1 :]
    model = f"{chr(65 + d.int(26))}{chr(65 + d.int(26))}-{100 + d.int(9900)}"
    title = f"{brand} {adj.capitalize()} {kind.title()} {model}, {attributes[0].title()}"
    options = tuple((n, d.pick(option_pool[n], 2, 5)) for n in names)
    price = round(base * math.exp(0.8 * d.uniform() - 0.4), 2)
    bullets = tuple(
        f"{a.capitalize()}: designed for {kind}s that last." if i == 0 else f"{a.capitalize()}."
        for i, a in enumerate(attributes)
    )
    description = (
        f"The {brand} {kind} is {', '.join(attributes[:-1]) + ' and ' if len(attributes) > 1 else ''}"
        f"{attributes[-1]}. {'An' if adj[0] in 'aeiou' else 'A'} {adj} choice for every day."
    )
    reviews = d.pick(_REVIEWS, 0, 2)
    rating = "N.A." if not reviews else f"{sum(float(r[1]) for r in reviews) / len(reviews):.1f}"
    return Product(
        asin_of(index),
        title,
        price,
        f"${price}",
        top,
        kind,
        f"{path} › {top.title()} › {kind.title()}",
        description,
        bullets,
        attributes,
        options,
        rating,
        tuple(Review(*r) for r in reviews),
    )


class GeneratedProducts(Sequence[Product]):
    """The products ``0 .. size-1`` of a seeded catalogue, made on demand."""

    def __init__(self, seed: int, size: int) -> None:
        self.seed, self.size = seed, check_size(size)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if not -self.size <= index < self.size:
            raise IndexError(index)
        return generate_product(self.seed, index % self.size)


def _tight(rng: np.random.Generator, knobs: Knobs) -> bool:
    return bool(knobs.tight_price) and rng.random() < knobs.tight_price  # no draw on easy


def generate_goal(seed: int, size: int, index: int, knobs: Knobs | None = None) -> Goal:
    """Goal ``index``: a product, some of its attributes, one value per option, a price limit, an instruction."""
    k = knobs or Knobs()
    rng = np.random.default_rng([seed, size, index, 23])
    product = generate_product(seed, int(rng.integers(size)))
    attrs = _pick(rng, product.attributes, min(k.min_attributes, len(product.attributes)), k.max_attributes)
    chosen = tuple((n, vs[int(rng.integers(len(vs)))]) for n, vs in product.options)
    upper, price_text = price_limit(
        product.price,
        lambda xs, n: [xs[0], xs[0]] if _tight(rng, k) else [xs[i] for i in rng.choice(len(xs), n, replace=False)],
    )

    def say(text: str) -> str:
        return SAID.get(text, text) if k.paraphrase and rng.random() < k.paraphrase else text  # no draw on easy

    said_attrs = [say(a) for a in attrs]
    said = ", ".join(said_attrs[:-1]) + (" and " if len(attrs) > 1 else "") + said_attrs[-1]
    kind = say(product.query)
    templates = _SAID_TEMPLATES if k.paraphrase else _TEMPLATES
    text = templates[int(rng.integers(len(templates)))].format(
        art="an" if kind[0] in "aeiou" else "a", type=kind, attrs=said
    )
    options = ", and ".join(f"{n}: {say(v)}" for n, v in chosen)
    return Goal(
        product.asin,
        f"{text}{' with ' + options if options else ''}{price_text}",
        attrs,
        chosen,
        upper,
        product.category,
        product.query,
        product.title,
        product.product_category,
    )


def goal_source(seed: int, size: int, knobs: Knobs | None = None) -> GeneratedSource:
    """Unlimited goals over a generated catalogue; task ids ``generated-<seed>-<size>-<index>``."""

    def make(index: int) -> Task:
        goal = generate_goal(seed, size, index, knobs)
        return Task(f"generated-{seed}-{size}-{index}", goal.instruction_text, goal.asin, {"goal": goal})

    return GeneratedSource(make, f"generated-{seed}-{size}")
