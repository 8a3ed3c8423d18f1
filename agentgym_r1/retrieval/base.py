"""The retrieval interface every backend implements (in-process BM25, Lucene, dense, hybrid, HTTP)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentgym_r1.error import RetrievalError

__all__ = ["Document", "Hit", "RetrievalError", "Retriever", "as_documents"]


@dataclass(frozen=True, slots=True)
class Document:
    """One passage of a corpus. ``contents`` is what is indexed (title and text)."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved document with its score (higher is better) and rank (0-based)."""

    doc: Document
    score: float
    rank: int


class Retriever:
    """Top-k search over a corpus. Backends subclass this; the env only sees this interface.

    ``search`` and ``batch_search`` raise :class:`RetrievalError` when the backend cannot answer (a server that is down,
    a timeout); envs turn that into an error observation for the agent.
    """

    backend: str = ""

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]

    def close(self) -> None:
        """Free what the retriever holds (files, connections)."""

    def __len__(self) -> int:
        raise NotImplementedError


def as_documents(records: Iterable[Document | dict]) -> list[Document]:
    """Documents from ``Document`` objects or dicts (``{"id", "title", "text"}`` or Search-R1's
    ``{"id", "contents"}``)."""
    out: list[Document] = []
    for i, r in enumerate(records):
        if isinstance(r, Document):
            out.append(r)
        elif "contents" in r and "text" not in r:
            title, _, text = str(r["contents"]).partition("\n")
            out.append(Document(str(r.get("id", i)), title.strip('"'), text))
        else:
            out.append(Document(str(r.get("id", i)), str(r.get("title", "")), str(r.get("text", ""))))
    return out
