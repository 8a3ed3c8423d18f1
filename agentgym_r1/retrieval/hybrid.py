"""Hybrid retrieval: reciprocal rank fusion (Cormack et al., 2009) of two retrievers, e.g. BM25 and dense.

A document's fused score is ``sum(1 / (k0 + rank))`` over the retrievers that return it (rank from 1), each asked for
``depth`` hits (at least ``k``). Documents are matched by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentgym_r1.error import ConfigError
from agentgym_r1.retrieval.base import Document, Hit, Retriever, as_documents
from agentgym_r1.retrieval.manifest import IndexManifest, read_manifest, write_manifest

__all__ = ["HybridRetriever", "reciprocal_rank_fusion"]


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Hit]], k: int, k0: float = 60.0) -> list[Hit]:
    """Fuse ranked hit lists into one top-``k`` list scored by reciprocal rank."""
    scores: dict[str, float] = {}
    docs: dict[str, Document] = {}
    for hits in rankings:
        for hit in hits:
            scores[hit.doc.id] = scores.get(hit.doc.id, 0.0) + 1.0 / (k0 + hit.rank + 1)
            docs.setdefault(hit.doc.id, hit.doc)
    best = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [Hit(docs[doc_id], score, rank) for rank, (doc_id, score) in enumerate(best)]


class HybridRetriever(Retriever):
    """RRF of any two retrievers. Built by the factory as ``backends=("bm25", "dense")`` in sub-directories."""

    backend = "hybrid"

    def __init__(self, first: Retriever, second: Retriever, k0: float = 60.0, depth: int = 20) -> None:
        self.retrievers = (first, second)
        self.k0 = k0
        self.depth = depth

    @classmethod
    def build(
        cls,
        documents: Iterable[Document | dict],
        index_dir: str | Path | None = None,
        *,
        backends: Sequence[str] = ("bm25", "dense"),
        model: str | Path | None = None,
        fingerprint: str | None = None,
        k0: float = 60.0,
        depth: int = 20,
        threads: int | None = None,
    ) -> HybridRetriever:
        """Build both sub-indexes (``index_dir/<backend>``); ``model`` and ``threads`` go to the dense one."""
        from agentgym_r1.retrieval.factory import backend_class

        if len(backends) != 2 or "hybrid" in backends:
            raise ConfigError(f"hybrid fuses two non-hybrid backends, got backends={tuple(backends)!r}.")
        docs = as_documents(documents)
        path = Path(index_dir) if index_dir is not None else None
        subs = []
        for name in backends:
            opts: dict[str, Any] = {"model": model, "threads": threads} if name == "dense" else {}
            sub_dir = path / name if path is not None else None
            subs.append(backend_class(name).build(docs, sub_dir, fingerprint=fingerprint, **opts))
        if path is not None:
            write_manifest(
                path,
                IndexManifest(
                    cls.backend,
                    fingerprint or "",
                    len(docs),
                    model=Path(model).name if model else None,
                    options={"backends": list(backends), "k0": k0, "depth": depth},
                ),
            )
        return cls(subs[0], subs[1], k0, depth)

    @classmethod
    def load(
        cls,
        index_dir: str | Path,
        *,
        model: str | Path | None = None,
        backends: Sequence[str] | None = None,
        k0: float | None = None,
        depth: int | None = None,
        threads: int | None = None,
    ) -> HybridRetriever:
        from agentgym_r1.retrieval.factory import backend_class

        path = Path(index_dir)
        manifest = read_manifest(path)
        manifest.check(path, cls.backend, None if model is None else str(model))
        names = manifest.options["backends"]
        if backends is not None and list(backends) != names:
            raise ConfigError(f"hybrid index {str(path)!r} fuses {names}, not {list(backends)}.")
        dense_opts = {"model": model, "threads": threads}
        subs = [backend_class(n).load(path / n, **(dense_opts if n == "dense" else {})) for n in names]
        return cls(subs[0], subs[1], k0 or manifest.options.get("k0", 60.0), depth or manifest.options.get("depth", 20))

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Hit]]:
        if k <= 0:
            return [[] for _ in queries]
        depth = max(k, self.depth)
        first, second = (r.batch_search(queries, depth) for r in self.retrievers)
        return [reciprocal_rank_fusion([a, b], k, self.k0) for a, b in zip(first, second, strict=True)]

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return self.batch_search([query], k)[0]

    def __len__(self) -> int:
        return len(self.retrievers[0])

    def close(self) -> None:
        for r in self.retrievers:
            r.close()
