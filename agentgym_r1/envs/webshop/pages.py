"""The shop's pages in WebShop's text mode: ``[SEP]``-separated visible text, and the clickables of each page.

A :class:`Session` is where the shopper is (page, query, results, product, chosen options). :func:`render` writes
the page as WebShop's ``observation_mode="text"`` does (``WebShop [SEP] Instruction: [SEP] ... [SEP] Back to Search
[SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B07FYPSNH8 [SEP] title [SEP] $19.99 ...``) and lists the
clickables, lowercased as WebShop's ``get_available_actions`` gives them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agentgym_r1.envs.webshop.catalogue import PRODUCT_WINDOW, Catalogue, Product

SEP = " [SEP] "
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "Back to Search", "Next >", "< Prev", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
PAGES = ("search", "results", "item", "description", "features", "reviews", "done")


@dataclass(slots=True)
class Session:
    """The shopper's place on the site. ``page`` is one of :data:`PAGES`."""

    page: str = "search"
    query: str = ""
    results: list[str] = field(default_factory=list)
    page_no: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    def last_page(self) -> int:
        return max(1, -(-len(self.results) // PRODUCT_WINDOW))


def header(instruction: str) -> str:
    return f"WebShop{SEP}Instruction:{SEP}{instruction}"


def _results(s: Session, catalogue: Catalogue) -> tuple[list[str], list[str]]:
    parts = [BACK_TO_SEARCH, f"Page {s.page_no} (Total results: {len(s.results)})"]
    clickables = [BACK_TO_SEARCH.lower()]
    if s.page_no > 1:
        parts.append(PREV_PAGE)
        clickables.append(PREV_PAGE.lower())
    if s.page_no < s.last_page():
        parts.append(NEXT_PAGE)
        clickables.append(NEXT_PAGE.lower())
    start = (s.page_no - 1) * PRODUCT_WINDOW
    for asin in s.results[start : start + PRODUCT_WINDOW]:
        p = catalogue.by_asin(asin)
        if p is not None:
            parts += [p.asin, p.title, p.price_tag]
            clickables.append(p.asin.lower())
    return parts, clickables


def option_values(product: Product) -> list[str]:
    """The option buttons of an item page, in page order, each once."""
    return list(dict.fromkeys(v for _, values in product.options for v in values))


def _item(product: Product) -> tuple[list[str], list[str]]:
    parts = [BACK_TO_SEARCH, PREV_PAGE]
    for name, values in product.options:
        parts += [name, *values]
    parts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}", *SUB_PAGES, BUY_NOW]
    clickables = [
        BACK_TO_SEARCH.lower(),
        PREV_PAGE.lower(),
        *option_values(product),
        *(x.lower() for x in SUB_PAGES),
        BUY_NOW.lower(),
    ]
    return parts, clickables


def _sub_page(page: str, product: Product) -> list[str]:
    if page == "description":
        body = [product.description]
    elif page == "features":
        body = list(product.bullets)
    else:
        body = [x for r in product.reviews for x in (r.title, r.score, r.body)]
    return [BACK_TO_SEARCH, PREV_PAGE, *(b for b in body if b)]


def render(s: Session, catalogue: Catalogue, instruction: str) -> tuple[str, list[str]]:
    """``(page text, clickables)`` for the session's page (not for ``done``: see :func:`render_done`)."""
    if s.page == "search":
        return f"{header(instruction)}{SEP}Search", []
    if s.page == "results":
        parts, clickables = _results(s, catalogue)
    else:
        product = catalogue.by_asin(s.asin or "")
        assert product is not None, "the session's product is in the catalogue"
        if s.page == "item":
            parts, clickables = _item(product)
        else:
            parts, clickables = _sub_page(s.page, product), [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()]
    return header(instruction) + SEP + SEP.join(parts), clickables


def render_done(asin: str, options: dict[str, str], score: float) -> str:
    return SEP.join(
        [
            "Thank you for shopping with us!",
            "Purchased",
            "asin",
            asin,
            "options",
            json.dumps(options, ensure_ascii=False),
            "Your score (min 0.0, max 1.0)",
            f"{score:.4f}",
        ]
    )


def available_actions(s: Session, clickables: list[str]) -> str:
    """The line appended to each observation that lists what the agent can do on this page."""
    actions = (["search[<your query>]"] if s.page == "search" else []) + [f"click[{c}]" for c in clickables]
    return "Available actions: " + (", ".join(actions) if actions else "none")
