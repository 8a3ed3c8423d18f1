"""A tiny corpus with one unambiguous document per query, and the shared HotpotQA samples."""

from __future__ import annotations

import json

import pytest

from agentgym_r1.retrieval import Document, hotpotqa_paragraphs
from tests.conftest import shared_data

SMALL_DOCS = [
    Document("d0", "Ada Lovelace", "Ada Lovelace wrote the first published algorithm for Babbage's Analytical Engine."),
    Document(
        "d1", "Mount Kilimanjaro", "Kilimanjaro is a dormant volcano in Tanzania, the highest mountain in Africa."
    ),
    Document("d2", "Photosynthesis", "Plants convert sunlight, water and carbon dioxide into glucose and oxygen."),
    Document("d3", "Tour de France", "The Tour de France is an annual men's multiple-stage bicycle race in France."),
    Document("d4", "Zürich", "Zürich is the largest city in Switzerland, on the northern end of Lake Zürich."),
    Document(
        "d5",
        "Python (programming language)",
        "Python is a high-level programming language created by Guido van Rossum and first released in 1991.",
    ),
    Document(
        "d6", "Great Barrier Reef", "The Great Barrier Reef off Queensland, Australia, is the largest coral reef."
    ),
    Document(
        "d7", "Marie Curie", "Marie Curie was a physicist and chemist who did pioneering research on radioactivity."
    ),
]

# (query, id of the one document that answers it)
QUERIES = [
    ("who wrote the first algorithm for the analytical engine", "d0"),
    ("highest mountain in Africa volcano", "d1"),
    ("how do plants make glucose from sunlight", "d2"),
    ("annual bicycle race", "d3"),
    ("largest city of Switzerland", "d4"),
    ("Guido van Rossum programming language", "d5"),
    ("coral reef Queensland", "d6"),
    ("pioneering research on radioactivity", "d7"),
]

BAD_QUERIES = [
    "",
    "   ",
    "!!!?.,;",
    "AND OR NOT",
    'title:foo "bar (baz] ^2 ~ * ?',
    "\\",
    "\x00\x1f",
    "中文 検索 Ελληνικά Beyoncé",
    "🙂" * 50,
    "x" * 100_000,
    "lake " * 10_000,
    "the of and a",
    "<search>q</search>",
    '+-&&||!(){}[]^"~*?:\\/',
    "NOT",
    "*:*",
    "a" * 300,
]


@pytest.fixture(scope="session")
def hotpot_records() -> list[dict]:
    files = sorted(shared_data("hotpotqa").glob("hotpot_dev_distractor_sample_*.jsonl"))
    if not files:
        pytest.skip("no HotpotQA samples in the shared data")
    return [json.loads(line) for f in files for line in f.open(encoding="utf-8") if line.strip()]


@pytest.fixture(scope="session")
def hotpot_docs(hotpot_records) -> list[Document]:
    return hotpotqa_paragraphs(hotpot_records)
