"""Catalogue sources: the official WebShop files, or the procedural generator. Each is loaded once per process."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from pathlib import Path

from agentgym_r1.core.difficulty import resolve
from agentgym_r1.core.tasks import ListSource, Task
from agentgym_r1.envs.webshop import generator, official
from agentgym_r1.envs.webshop.catalogue import Catalogue, Goal, Product
from agentgym_r1.error import ConfigError, DataFormatError
from agentgym_r1.retrieval.base import Document

GOAL_KINDS = ("auto", "human", "synthetic")


def documents(products: Iterable[Product]) -> Iterable[Document]:
    """What the search engine indexes: the title, then attributes, description and option values."""
    for p in products:
        yield Document(p.asin, p.title, p.search_text())


def _index(products: Iterable[Product]) -> object:
    from agentgym_r1.retrieval.factory import build_retriever

    return build_retriever("bm25", list(documents(products)), None)


def _tasks(goals: list[Goal], kind: str) -> ListSource:
    return ListSource([Task(f"{kind}-{i}", g.instruction_text, g.asin, {"goal": g}) for i, g in enumerate(goals)])


@functools.lru_cache(maxsize=8)
def load_official(path: str, goals: str = "auto", seed: int = 0, num_products: int | None = None) -> Catalogue:
    """A catalogue from official files (a product file, or a directory with the product, attribute and human
    instruction files). ``goals``: ``"human"`` (the human instructions), ``"synthetic"`` (items_ins_v2's
    instructions, one goal per option combination) or ``"auto"`` (human when there are any, else synthetic)."""
    if goals not in GOAL_KINDS:
        raise ConfigError(f"goals must be one of {GOAL_KINDS}, got {goals!r}")
    products_file, attr_file, human_file = official.find_files(Path(path))
    attributes = official.load_mapping(attr_file, "attributes (items_ins_v2)", dict)
    products, human = official.load_products(products_file, attributes, seed, num_products)
    if not products:
        raise DataFormatError(f"{products_file} holds no products")
    human = {**human, **official.load_mapping(human_file, "human instructions (items_human_ins)", list)}
    kind = goals if goals != "auto" else ("human" if human else "synthetic")
    found = (
        official.human_goals(products, human, seed)
        if kind == "human"
        else official.synthetic_goals(products, attributes, seed)
    )
    if not found:
        raise DataFormatError(
            f"no {kind} goals for the products in {products_file}: {kind} goals come from "
            f"{'items_human_ins*.json (or product instructions)' if kind == 'human' else 'items_ins_v2*.json'} "
            f"beside it (found: {human_file if kind == 'human' else attr_file})."
        )
    return Catalogue(
        f"{products_file.name}:{kind}",
        tuple(products),
        _tasks(found, kind),
        index=_index(products),
        goal_weights=tuple(g.weight for g in found),
    )


@functools.lru_cache(maxsize=8)
def load_generated(seed: int = 0, num_products: int = 1000) -> Catalogue:
    """The procedural catalogue of ``num_products`` products seeded by ``seed``, with unlimited goals."""
    products = generator.GeneratedProducts(seed, generator.check_size(num_products))
    return Catalogue(
        f"generated-{seed}-{num_products}",
        products,
        generator.goal_source(seed, num_products),
        index=_index(generator.iter_products(seed, num_products)),
        lookup=functools.partial(_generated_index, size=num_products),
    )


def _generated_index(asin: str, size: int) -> int | None:
    return generator.index_of(asin, size)


@functools.lru_cache(maxsize=16)
def _at_level(catalogue: Catalogue, seed: int, num_products: int, knobs: generator.Knobs) -> Catalogue:
    """The generated catalogue with its goals at ``knobs``: the products and the search index are shared."""
    return dataclasses.replace(catalogue, goals=generator.goal_source(seed, num_products, knobs))


def difficulty_of(source: str | Path, difficulty: object) -> tuple[str, generator.Knobs]:
    """The level's label and knobs; a level other than ``easy`` is refused on the official files."""
    label, knobs = resolve('WebShop source="generated"', generator.LEVELS, difficulty)
    if str(source) != "generated" and label != "easy":
        raise ConfigError(
            f"difficulty is for source='generated'; the goals of {str(source)!r} are as they are "
            f"(got difficulty={difficulty!r})"
        )
    return label, knobs


def load_catalogue(
    source: str | Path = "generated",
    *,
    goals: str = "auto",
    seed: int = 0,
    num_products: int | None = None,
    knobs: generator.Knobs | None = None,
) -> Catalogue:
    """``source="generated"`` (default, offline; ``num_products`` default 1000; goals at ``knobs``, default
    ``easy``) or a path to official files."""
    if str(source) == "generated":
        if goals not in ("auto", "synthetic"):
            raise ConfigError(f"the generated catalogue has synthetic goals only; got goals={goals!r}")
        size = 1000 if num_products is None else num_products
        catalogue = load_generated(seed, size)
        return (
            catalogue if knobs is None or knobs == generator.LEVELS["easy"] else _at_level(catalogue, seed, size, knobs)
        )
    return load_official(str(Path(source).expanduser().resolve()), goals, seed, num_products)
