"""The in-process BM25 backend (tantivy): right documents, saved indexes, bad queries, recall on HotpotQA."""

from __future__ import annotations

import itertools

import pytest

from agentgym_r1.error import IndexMismatchError, IndexNotFoundError
from agentgym_r1.retrieval.base import Document
from tests.retrieval.conftest import BAD_QUERIES, QUERIES, SMALL_DOCS

pytest.importorskip("tantivy")

from agentgym_r1.retrieval.bm25 import BM25Retriever


@pytest.fixture(scope="module")
def bm25() -> BM25Retriever:
    return BM25Retriever.build(SMALL_DOCS)


@pytest.mark.parametrize(("query", "doc_id"), QUERIES)
def test_top_hit_is_the_answering_document(bm25, query, doc_id):
    hits = bm25.search(query, k=3)
    assert hits[0].doc.id == doc_id
    assert [h.rank for h in hits] == list(range(len(hits)))
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))


def test_documents_come_back_whole(bm25):
    hit = bm25.search("Zürich Switzerland", k=1)[0]
    assert hit.doc == SMALL_DOCS[4]
    assert len(bm25) == len(SMALL_DOCS)


def test_k_bounds_the_hits(bm25):
    assert len(bm25.search("the largest", k=2)) == 2
    assert bm25.search("largest", k=0) == []
    assert len(bm25.batch_search(["reef", "volcano", ""], k=1)) == 3


def test_stemming_and_folding_match_variants(bm25):
    assert bm25.search("zurich", k=1)[0].doc.id == "d4"
    assert bm25.search("converting plant", k=1)[0].doc.id == "d2"


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_bad_queries_never_raise(bm25, query):
    hits = bm25.search(query, k=5)
    assert isinstance(hits, list) and len(hits) <= 5
    assert len(bm25.terms(query)) <= 64


def test_stop_words_and_punctuation_only_give_no_hits(bm25):
    assert bm25.search("the of and", k=5) == []
    assert bm25.search("?!.,", k=5) == []


def test_save_and_load_round_trip(tmp_path):
    built = BM25Retriever.build(SMALL_DOCS, tmp_path / "idx", fingerprint="docs:x")
    loaded = BM25Retriever.load(tmp_path / "idx")
    assert len(loaded) == len(SMALL_DOCS)
    for query, _ in QUERIES:
        assert [(h.doc, round(h.score, 5)) for h in loaded.search(query)] == [
            (h.doc, round(h.score, 5)) for h in built.search(query)
        ]
    loaded.close()


def test_load_missing_index_raises(tmp_path):
    with pytest.raises(IndexNotFoundError, match="build_retriever"):
        BM25Retriever.load(tmp_path / "nothing")


def test_load_index_of_another_backend_raises(tmp_path):
    from agentgym_r1.retrieval.manifest import IndexManifest, write_manifest

    write_manifest(tmp_path, IndexManifest("dense", "docs:x", 3, model="all-MiniLM-L6-v2"))
    with pytest.raises(IndexMismatchError, match="'dense'"):
        BM25Retriever.load(tmp_path)


def test_recall_at_5_of_gold_paragraphs_on_hotpotqa(hotpot_records, hotpot_docs):
    """BM25 recall@5 of the supporting paragraphs for the question text, on the shared HotpotQA samples."""
    retriever = BM25Retriever.build(hotpot_docs)
    found = total = 0
    results = retriever.batch_search([r["question"] for r in hotpot_records], 5)
    for record, hits in zip(hotpot_records, results, strict=True):
        gold = set(record["supporting_facts"]["title"])
        found += len(gold & {h.doc.title for h in hits})
        total += len(gold)
    recall = found / total
    print(
        f"\nBM25 (tantivy) recall@5 of gold paragraphs: {recall:.3f} over {len(hotpot_records)} questions, "
        f"{len(hotpot_docs)} paragraphs"
    )
    assert len(hotpot_docs) > 10_000
    assert recall > 0.5


def test_any_characters_in_documents_round_trip():
    odd = Document('id\x1f\n"1"', 'Tïtle \x1f with \\ quotes "', "Text with\nnew lines, \x00 and 🙂 zebra.")
    retriever = BM25Retriever.build([*SMALL_DOCS, odd])
    assert retriever.search("zebra", k=1)[0].doc == odd


def test_unstemmed_index_keeps_its_analyzer(tmp_path):
    BM25Retriever.build(SMALL_DOCS, tmp_path / "idx", stem=False)
    loaded = BM25Retriever.load(tmp_path / "idx")
    assert loaded.stem is False
    assert loaded.terms("converting plants") == ["converting", "plants"]
    assert loaded.search("plants", k=1)[0].doc.id == "d2"
    with pytest.raises(IndexMismatchError, match="stem=False"):
        BM25Retriever.load(tmp_path / "idx", stem=True)


def test_huge_k_is_bounded_and_closed_retriever_raises_retrieval_error():
    from agentgym_r1.error import RetrievalError

    retriever = BM25Retriever.build(SMALL_DOCS)
    assert len(retriever.search("the largest city reef", k=10**12)) <= len(SMALL_DOCS)
    retriever.close()
    with pytest.raises(RetrievalError, match="closed"):
        retriever.search("reef")


def test_ties_are_ordered_by_id_whatever_the_index_order():
    # ten identical documents indexed in a scrambled order: every score ties, so only the id can order them
    ids = [f"d{i}" for i in (7, 2, 9, 0, 5, 3, 8, 1, 6, 4)]
    retriever = BM25Retriever.build([Document(i, "Same", "a red shoe") for i in ids])
    assert [h.doc.id for h in retriever.search("red shoe", k=3)] == ["d0", "d1", "d2"]
    assert [h.doc.id for h in retriever.search("red shoe", k=10)] == sorted(ids)


def test_a_lone_surrogate_in_a_query_is_searched_not_raised(bm25):
    assert bm25.search("reef\ud800", k=1)[0].doc.id == bm25.search("reef", k=1)[0].doc.id
