"""Lucene BM25 through pyserini: right documents, saved index, bad queries (skips without the lucene extra)."""

from __future__ import annotations

import shutil

import pytest

from agentgym_r1.error import ConfigError, IndexMismatchError
from agentgym_r1.retrieval import build_retriever, clear_retriever_cache, load_retriever
from tests.retrieval.conftest import BAD_QUERIES, QUERIES, SMALL_DOCS

pytest.importorskip("pyserini")
if shutil.which("java") is None:
    pytest.skip("pyserini needs Java 17+ on PATH", allow_module_level=True)

from agentgym_r1.retrieval.lucene import LuceneRetriever


@pytest.fixture(scope="module")
def lucene(tmp_path_factory) -> LuceneRetriever:
    retriever = LuceneRetriever.build(SMALL_DOCS, tmp_path_factory.mktemp("lucene") / "idx")
    yield retriever
    retriever.close()


@pytest.mark.parametrize(("query", "doc_id"), QUERIES)
def test_top_hit_is_the_answering_document(lucene, query, doc_id):
    hits = lucene.search(query, k=3)
    assert hits[0].doc.id == doc_id
    assert [h.rank for h in hits] == list(range(len(hits)))


def test_documents_come_back_whole(lucene):
    assert lucene.search("Zürich Switzerland", k=1)[0].doc == SMALL_DOCS[4]
    assert len(lucene) == len(SMALL_DOCS)


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_bad_queries_never_raise(lucene, query):
    assert len(lucene.search(query, k=5)) <= 5


def test_reloaded_through_the_factory(lucene):
    clear_retriever_cache()
    loaded = load_retriever(lucene.index_dir, backend="lucene", cache=False)
    assert [h.doc.id for h in loaded.search("coral reef Queensland")] == [
        h.doc.id for h in lucene.search("coral reef Queensland")
    ]
    loaded.close()
    with pytest.raises(IndexMismatchError):
        load_retriever(lucene.index_dir, backend="bm25")


def test_needs_an_index_dir():
    with pytest.raises(ConfigError, match="index_dir"):
        build_retriever("lucene", SMALL_DOCS, cache=False)
