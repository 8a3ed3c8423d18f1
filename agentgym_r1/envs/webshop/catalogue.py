"""The product catalogue: products, goals and search, loaded once per process and shared read-only by every env.

A :class:`Catalogue` holds products (by index and by ASIN), the goals the env plays (a :class:`TaskSource` whose tasks
carry a :class:`Goal` in ``meta["goal"]``) and a search engine: BM25 over each product's title, attributes and
description (and option values) through :mod:`agentgym_r1.retrieval`. Products are frozen dataclasses and the
catalogue is never written to after it is built, so any number of env instances can share one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym_r1.core.tasks import TaskSource

SEARCH_RETURN_N = 50  # results a search returns (WebShop's SEARCH_RETURN_N)
PRODUCT_WINDOW = 10  # results on one page (WebShop's PRODUCT_WINDOW)
PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))  # goal price limits, as in WebShop's goal.py


@dataclass(frozen=True, slots=True)
class Review:
    title: str
    score: str
    body: str


@dataclass(frozen=True, slots=True)
class Product:
    """One product as the pages show it and the reward reads it (WebShop's processed product record).

    ``price`` is the one price the reward compares with the goal's limit (the single price, or a seeded draw in a
    ``$a to $b`` range, as WebShop's ``generate_product_prices``); ``price_tag`` is what the pages show.
    ``options`` is ``((name, (value, ...)), ...)``, names and values lowercased.
    """

    asin: str
    title: str
    price: float
    price_tag: str
    category: str
    query: str
    product_category: str
    description: str = ""
    bullets: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    rating: str = "N.A."
    reviews: tuple[Review, ...] = ()

    @property
    def option_dict(self) -> dict[str, tuple[str, ...]]:
        return dict(self.options)

    def search_text(self) -> str:
        """What the search engine indexes besides the title: attributes, description and option values."""
        values = " ".join(v for _, vs in self.options for v in vs)
        return " ".join(filter(None, (" ".join(self.attributes), self.description, values)))


@dataclass(frozen=True, slots=True)
class Goal:
    """What the shopper wants, in WebShop's goal shape (``get_human_goals`` / ``get_synthetic_goals``).

    ``goal_options`` maps option names to values when they are known (synthetic goals); human goals only have
    values, kept under the names the annotators' product page gave them, or ``""`` when none is known.
    """

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    goal_options: tuple[tuple[str, str], ...]
    price_upper: float
    category: str
    query: str
    name: str
    product_category: str
    weight: float = 1.0

    @property
    def option_values(self) -> list[str]:
        return [v for _, v in self.goal_options]

    def to_dict(self) -> dict[str, Any]:
        return {
            "asin": self.asin,
            "instruction_text": self.instruction_text,
            "attributes": list(self.attributes),
            "goal_options": dict(self.goal_options) if all(k for k, _ in self.goal_options) else self.option_values,
            "price_upper": self.price_upper,
            "category": self.category,
            "query": self.query,
            "name": self.name,
            "product_category": self.product_category,
        }


def price_limit(price: float, draw: Callable[[Sequence[float], int], Sequence[float]]) -> tuple[float, str]:
    """WebShop's goal price limit: the larger of two of the (up to) four ``PRICE_RANGE`` steps above the price.

    ``draw(candidates, 2)`` samples two distinct candidates (seeded by the caller). With fewer than two candidates
    there is no limit (1,000,000, and no price text), as in the original.
    """
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return 1_000_000.0, ""
    upper = max(draw(candidates, 2))
    return float(upper), f", and price lower than {upper:.2f} dollars"


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Products, goals and a search engine. Build once (the loaders cache it) and share between envs."""

    name: str
    products: Sequence[Product]
    goals: TaskSource
    index: Any  # a Retriever over the products (id = ASIN)
    lookup: Callable[[str], int | None] | None = None  # ASIN (upper case) -> index; default: a dict built here
    goal_weights: Sequence[float] | None = None  # draw goals in proportion (WebShop's goal weights); None: uniform
    _cumulative: Any = None

    def __post_init__(self) -> None:
        if self.lookup is None:
            object.__setattr__(self, "lookup", {p.asin.upper(): i for i, p in enumerate(self.products)}.get)
        if self.goal_weights is not None and len(set(self.goal_weights)) > 1:
            cumulative = np.cumsum(np.asarray(self.goal_weights, dtype=float))
            cumulative.flags.writeable = False
            object.__setattr__(self, "_cumulative", cumulative)

    def draw_goal(self, rng: np.random.Generator) -> int:
        """A goal index drawn with ``rng``: in proportion to the goal weights (as WebShop samples its synthetic
        goals, favouring rare attributes), or uniformly when all weights are equal."""
        if self._cumulative is None:
            return int(rng.integers(len(self.goals)))
        u = rng.random() * self._cumulative[-1]
        return min(int(np.searchsorted(self._cumulative, u, side="right")), len(self._cumulative) - 1)

    def __len__(self) -> int:
        return len(self.products)

    def __iter__(self) -> Iterator[Product]:
        return iter(self.products)

    def by_asin(self, asin: str) -> Product | None:
        """The product with this ASIN (any case), or ``None``."""
        assert self.lookup is not None
        i = self.lookup(asin.upper())
        return None if i is None else self.products[i]

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """The ASINs of the top ``k`` products for ``query`` (BM25); raises :class:`RetrievalError` if it cannot."""
        return [hit.doc.id for hit in self.index.search(query, k)]
