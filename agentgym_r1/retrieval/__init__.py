"""Retrieval backends behind one interface (:class:`Retriever`).

``bm25`` (in-process, tantivy; the default), ``lucene`` (pyserini), ``dense`` (faiss + sentence-transformers),
``hybrid`` (reciprocal rank fusion) and :class:`HttpRetriever` (a client of ``agentgym-r1 serve retriever``). Build or
load one with :func:`build_retriever` / :func:`load_retriever`; backends import their heavy dependencies only when used.
"""

from agentgym_r1.retrieval.base import Document, Hit, RetrievalError, Retriever, as_documents
from agentgym_r1.retrieval.bm25 import BM25Retriever
from agentgym_r1.retrieval.corpus import hotpotqa_paragraphs, iter_corpus, load_corpus
from agentgym_r1.retrieval.dense import DenseRetriever
from agentgym_r1.retrieval.factory import BACKENDS, build_retriever, clear_retriever_cache, load_retriever
from agentgym_r1.retrieval.http import HttpRetriever
from agentgym_r1.retrieval.hybrid import HybridRetriever, reciprocal_rank_fusion
from agentgym_r1.retrieval.lucene import LuceneRetriever

__all__ = [
    "BACKENDS",
    "BM25Retriever",
    "DenseRetriever",
    "Document",
    "Hit",
    "HttpRetriever",
    "HybridRetriever",
    "LuceneRetriever",
    "RetrievalError",
    "Retriever",
    "as_documents",
    "build_retriever",
    "clear_retriever_cache",
    "hotpotqa_paragraphs",
    "iter_corpus",
    "load_corpus",
    "load_retriever",
    "reciprocal_rank_fusion",
]
