"""The official WebShop data files: products, attributes and human instructions, in the shapes WebShop ships them.

* Products: ``items_shuffle*.json`` (the raw scrape: a list of ``{asin, name, full_description, small_description,
  pricing, customization_options, category, query, product_category, ...}``), or the processed search-engine
  documents ``documents.jsonl`` / ``resources_*_documents.jsonl`` (``{id, contents, product}`` per line, ``product``
  being the record after WebShop's ``load_products``).
* Attributes: ``items_ins_v2*.json`` (``{asin: {attributes, instruction?, instruction_attributes?}}``); its
  ``instruction`` entries are the synthetic goals.
* Human instructions: ``items_human_ins*.json`` (``{asin: [{instruction, instruction_attributes,
  instruction_options, ...}]}``); the human goals.

A file in any other shape raises :class:`DataFormatError` saying what was found and what is expected.
"""

from __future__ import annotations

import itertools
import json
import re
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_r1.envs.webshop.catalogue import Goal, Product, Review, price_limit
from agentgym_r1.error import DataFormatError, DataNotFoundError

PRODUCT_GLOBS = ("items_shuffle*.json", "resources*documents*.jsonl", "documents.jsonl")
ATTRIBUTE_GLOBS = ("items_ins_v2*.json",)
HUMAN_GLOBS = ("items_human_ins*.json",)
EXPECTED = (
    "a product file (items_shuffle*.json, or {id, contents, product} lines in a .jsonl), or a directory "
    "holding one, optionally with items_ins_v2*.json and items_human_ins*.json beside it"
)


def read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as f:
            if path.suffix == ".jsonl":
                return [json.loads(line) for line in f if line.strip()]
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataFormatError(f"{path} is not valid JSON{' lines' if path.suffix == '.jsonl' else ''} ({e})") from e


def find_files(source: Path) -> tuple[Path, Path | None, Path | None]:
    """``(products, attributes or None, human instructions or None)`` for a file or a directory."""
    if not source.exists():
        raise DataNotFoundError(
            f"WebShop source {str(source)!r} does not exist. Give {EXPECTED}, or "
            'source="generated" for the offline procedural catalogue.'
        )
    folder = source if source.is_dir() else source.parent

    def first(globs: Iterable[str]) -> Path | None:
        for g in globs:
            found = sorted(folder.glob(g))
            if found:
                return found[0]
        return None

    products = source if source.is_file() else first(PRODUCT_GLOBS)
    if products is None:
        raise DataNotFoundError(f"no product file in {source}: looked for {PRODUCT_GLOBS}. Give {EXPECTED}.")
    return products, first(ATTRIBUTE_GLOBS), first(HUMAN_GLOBS)


def _price(asin: str, pricing: list[float], seed: int) -> float:
    """WebShop's ``generate_product_prices``: the price, or a uniform draw in a range (seeded per ASIN)."""
    if not pricing:
        return 100.0
    if len(pricing) == 1:
        return float(pricing[0])
    rng = np.random.default_rng([seed, zlib.crc32(asin.encode())])
    return float(pricing[0] + (pricing[1] - pricing[0]) * rng.random())  # like random.uniform, either order


def _parse_pricing(raw: Any) -> tuple[list[float], str]:
    if not raw:
        return [100.0], "$100.0"
    if isinstance(raw, list):
        values = [float(x) for x in raw][:2]
    else:
        try:
            values = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in str(raw).split("$")[1:]][:2]
        except InvalidOperation:
            values = []
        if not values:
            return [100.0], "$100.0"
    tag = f"${values[0]}" if len(values) == 1 else f"${values[0]} to ${values[1]}"
    return values, tag


def _options(raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """WebShop's option cleaning: names lowercased; values stripped, '/' written ' | ', lowercased."""
    if not raw or not isinstance(raw, Mapping):
        return ()
    out = []
    for name, contents in raw.items():
        if contents is None:
            continue
        if isinstance(contents, list) and contents and isinstance(contents[0], str):  # processed: values already
            values = tuple(str(v).lower() for v in contents)
        else:
            values = tuple(str(c["value"]).strip().replace("/", " | ").lower() for c in contents)
        out.append((str(name).lower(), values))
    return tuple(out)


def _reviews(raw: Any) -> tuple[Review, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        Review(
            str(r.get("title", "")), str(r.get("score", r.get("stars", ""))), str(r.get("body", r.get("review", "")))
        )
        for r in raw
        if isinstance(r, Mapping)
    )


def product_from_record(p: Mapping[str, Any], attributes: Mapping[str, Any], seed: int) -> Product:
    """A :class:`Product` from a raw (``items_shuffle``) or processed (``load_products``) record."""
    asin = str(p["asin"])
    processed = "Title" in p
    pricing, tag = _parse_pricing(p.get("pricing"))
    if processed and isinstance(p.get("Price"), str):
        tag = p["Price"]
    bullets = p.get("BulletPoints") if processed else p.get("small_description")
    attrs = p.get("Attributes") if processed else (attributes.get(asin) or {}).get("attributes")
    if asin in attributes and "attributes" in attributes[asin]:
        attrs = attributes[asin]["attributes"]
    return Product(
        asin=asin,
        title=str(p["Title"] if processed else p["name"]),
        price=_price(asin, pricing, seed),
        price_tag=tag,
        category=str(p.get("category", "")),
        query=str(p.get("query", "")).lower().strip(),
        product_category=str(p.get("product_category", "")),
        description=str((p.get("Description") if processed else p.get("full_description")) or ""),
        bullets=tuple(str(b) for b in (bullets if isinstance(bullets, list) else [bullets] if bullets else [])),
        attributes=tuple(attrs) if attrs else ("DUMMY_ATTR",),
        options=_options(p.get("options") if processed else p.get("customization_options")),
        rating=str(p.get("Rating", "N.A.")) if processed else "N.A.",
        reviews=_reviews(p.get("Reviews")) if processed else (),
    )


def load_products(
    path: Path, attributes: Mapping[str, Any], seed: int, limit: int | None
) -> tuple[list[Product], dict[str, list[dict]]]:
    """Products from a product file, in file order, without duplicate or malformed ASINs (as WebShop skips them),
    and the human instructions found inside processed records."""
    data = read_json(path)
    if isinstance(data, list) and data and isinstance(data[0], Mapping) and "product" in data[0]:
        records = [d.get("product") if isinstance(d, Mapping) else None for d in data]
    elif isinstance(data, list) and data and isinstance(data[0], Mapping) and "asin" in data[0] and "name" in data[0]:
        records = data
    else:
        shape = type(data).__name__ + (f" of {type(data[0]).__name__}" if isinstance(data, list) and data else "")
        keys = (
            sorted(data[0])[:8]
            if isinstance(data, list) and data and isinstance(data[0], Mapping)
            else sorted(data)[:3]
            if isinstance(data, Mapping)
            else []
        )
        raise DataFormatError(
            f"{path} is not a WebShop product file: found a {shape} (keys {keys}). Expected {EXPECTED}."
        )
    products, seen, human = [], set(), {}
    for i, rec in enumerate(records[:limit] if limit else records):
        try:
            asin = str(rec["asin"])
            if asin == "nan" or len(asin) > 10 or asin in seen:
                continue
            seen.add(asin)
            products.append(product_from_record(rec, attributes, seed))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataFormatError(
                f"{path}: product record {i} (0-based) is malformed ({type(e).__name__}: {e}); "
                f"expected WebShop's product fields (asin, name or Title, ...)"
            ) from e
        if isinstance(rec.get("instructions"), list):
            human[asin] = rec["instructions"]
    return products, human


def load_mapping(path: Path | None, kind: str, value_type: type) -> dict[str, Any]:
    if path is None:
        return {}
    data = read_json(path)
    if not isinstance(data, Mapping) or not all(isinstance(v, value_type) for v in data.values()):
        raise DataFormatError(
            f"{path} is not a WebShop {kind} file: expected a JSON object from ASIN to a "
            f"{value_type.__name__}, got a {type(data).__name__}"
        )
    return dict(data)


def _goal_rng(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def _draw(rng: np.random.Generator):
    return lambda xs, n: [xs[i] for i in rng.choice(len(xs), size=n, replace=False)]


def human_goals(products: list[Product], human: Mapping[str, list[dict]], seed: int) -> list[Goal]:
    """WebShop's ``get_human_goals``: one goal per human instruction with at least one attribute."""
    goals = []
    for p in products:
        for k, ins in enumerate(human.get(p.asin, [])):
            attributes = tuple(ins.get("instruction_attributes") or ())
            if not attributes:
                continue
            upper, price_text = price_limit(p.price, _draw(_goal_rng(seed, f"{p.asin}-h{k}")))
            names = {v: n for n, vs in p.options for v in vs}
            options = tuple((names.get(v, ""), v) for v in ins.get("instruction_options") or ())
            goals.append(
                Goal(
                    p.asin,
                    str(ins["instruction"]).strip(".") + price_text,
                    attributes,
                    options,
                    upper,
                    p.category,
                    p.query,
                    p.title,
                    p.product_category,
                )
            )
    return goals


def synthetic_goals(products: list[Product], attributes: Mapping[str, Any], seed: int) -> list[Goal]:
    """WebShop's ``get_synthetic_goals``: for each product with an instruction, one goal per option combination."""
    goals, counts = [], defaultdict(int)
    for p in products:
        info = attributes.get(p.asin) or {}
        if not info.get("instruction"):
            continue
        attrs = tuple(info.get("instruction_attributes") or ())
        if not attrs:
            raise DataFormatError(f"items_ins_v2 entry {p.asin} has an instruction but no instruction_attributes")
        upper, price_text = price_limit(p.price, _draw(_goal_rng(seed, f"{p.asin}-s")))
        names = sorted(p.option_dict)
        for combo in itertools.product(*(p.option_dict[n] for n in names)):
            chosen = tuple(zip(names, combo, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in chosen)
            text = f"{info['instruction']}{' with ' + option_text if option_text else ''}{price_text}"
            goals.append(Goal(p.asin, text, attrs, chosen, upper, p.category, p.query, p.title, p.product_category))
            for a in attrs:
                counts[a] += 1
    return [_weighted(g, counts) for g in goals]


def _weighted(goal: Goal, counts: Mapping[str, int]) -> Goal:
    weight = sum(1.0 / counts[a] for a in goal.attributes) / len(goal.attributes)
    return Goal(
        goal.asin,
        goal.instruction_text,
        goal.attributes,
        goal.goal_options,
        goal.price_upper,
        goal.category,
        goal.query,
        goal.name,
        goal.product_category,
        weight,
    )
