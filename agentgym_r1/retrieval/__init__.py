"""Retrieval backends behind one interface (:class:`Retriever`)."""

from agentgym_r1.retrieval.base import Document, Hit, RetrievalError, Retriever, as_documents

__all__ = ["Document", "Hit", "RetrievalError", "Retriever", "as_documents"]
