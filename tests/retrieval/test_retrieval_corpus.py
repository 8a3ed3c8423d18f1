"""HotpotQA contexts as a corpus (both layouts, deduplicated by title) and the document store."""

from __future__ import annotations

import pytest

from agentgym_r1.error import DataFormatError
from agentgym_r1.retrieval import Document, hotpotqa_paragraphs
from agentgym_r1.retrieval.store import DocStore


def test_hf_and_official_layouts_give_the_same_paragraphs():
    hf = [
        {"id": "a", "context": {"title": ["X", "Y"], "sentences": [["X is ", "big."], ["Y is small."]]}},
        {"id": "b", "context": {"title": ["Y", "Z"], "sentences": [["Y again."], ["Z."]]}},
    ]
    official = [
        {"_id": "a", "context": [["X", ["X is ", "big."]], ["Y", ["Y is small."]]]},
        {"_id": "b", "context": [["Y", ["Y again."]], ["Z", ["Z."]]]},
    ]
    expected = [Document("X", "X", "X is big."), Document("Y", "Y", "Y is small."), Document("Z", "Z", "Z.")]
    assert hotpotqa_paragraphs(hf) == expected
    assert hotpotqa_paragraphs(official) == expected


def test_record_without_context_raises():
    with pytest.raises(DataFormatError, match="context"):
        hotpotqa_paragraphs([{"id": "q1", "question": "?"}])


def test_shared_samples_make_the_distractor_corpus(hotpot_docs):
    titles = [d.title for d in hotpot_docs]
    assert len(titles) == len(set(titles)) > 10_000
    assert all(d.text for d in hotpot_docs[:100])


def test_doc_store_round_trip(tmp_path):
    docs = [Document("1\x1f", "Zürich\x1f", "Line one\nline two \x1f"), Document("2", "", ""), Document("3", "T", "🙂")]
    assert DocStore.write(docs, tmp_path) == 3
    store = DocStore(tmp_path)
    assert len(store) == 3
    assert store.many([2, 0, 1]) == [docs[2], docs[0], docs[1]]
    store.close()
