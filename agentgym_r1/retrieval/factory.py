"""Build, save, load and share retrievers.

``build_retriever(backend, corpus, index_dir)`` builds an index once and saves it with a manifest; the next call with
the same directory and corpus loads it instead (memory-mapped where the backend allows). Retrievers are cached per
process, so every env instance over the same index shares one. ``load_retriever(index_dir)`` opens a saved index
with the backend its manifest names.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentgym_r1.error import ConfigError
from agentgym_r1.retrieval.base import Document, Retriever, as_documents
from agentgym_r1.retrieval.corpus import fingerprint_documents, fingerprint_file, iter_corpus
from agentgym_r1.retrieval.manifest import MANIFEST, read_manifest

__all__ = ["BACKENDS", "build_retriever", "clear_retriever_cache", "load_retriever"]

# backend name -> "module:class"; each class has build(documents, index_dir, fingerprint=, **opts)
# and load(index_dir, **opts)
BACKENDS: dict[str, str] = {
    "bm25": "agentgym_r1.retrieval.bm25:BM25Retriever",
    "lucene": "agentgym_r1.retrieval.lucene:LuceneRetriever",
    "dense": "agentgym_r1.retrieval.dense:DenseRetriever",
    "hybrid": "agentgym_r1.retrieval.hybrid:HybridRetriever",
}

_CACHE: dict[tuple, Retriever] = {}
_LOCK = threading.Lock()

Corpus = str | Path | Iterable[Document | dict]


def backend_class(backend: str) -> type:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown retrieval backend {backend!r}; choose one of {sorted(BACKENDS)}.")
    module, _, name = BACKENDS[backend].partition(":")
    return getattr(importlib.import_module(module), name)


def _key(backend: str, index_dir: Path | None, fingerprint: str | None, opts: dict[str, Any]) -> tuple:
    return backend, str(index_dir) if index_dir else None, fingerprint, repr(sorted(opts.items()))


def build_retriever(
    backend: str = "bm25",
    corpus: Corpus | None = None,
    index_dir: str | Path | None = None,
    *,
    overwrite: bool = False,
    cache: bool = True,
    **opts: Any,
) -> Retriever:
    """A retriever over ``corpus`` (a JSONL path or documents), built once into ``index_dir`` and reused.

    ``index_dir=None`` keeps the index in memory (not for ``lucene``). An existing index in ``index_dir`` is loaded
    when its manifest matches (backend, model, corpus fingerprint); a mismatch raises
    :class:`~agentgym_r1.error.IndexMismatchError` unless ``overwrite=True``. With ``cache=True`` the same call in the
    same process returns the same object: do not ``close`` a shared retriever (:func:`clear_retriever_cache` forgets
    them all).
    Backend options (``model=``, ``device=``, ``backends=``, ...) go in ``opts``.
    """
    if backend not in BACKENDS:
        backend_class(backend)  # raises the ConfigError naming the backends
    if corpus is None:
        if index_dir is None:
            raise ConfigError("build_retriever needs a corpus (a JSONL path or documents) or an existing index_dir.")
        return load_retriever(index_dir, backend=backend, cache=cache, **opts)
    path = Path(index_dir).resolve() if index_dir is not None else None
    if isinstance(corpus, (str, Path)):
        fingerprint = fingerprint_file(corpus)
        documents: Iterable[Document] = iter_corpus(corpus)
    else:
        documents = as_documents(corpus)
        fingerprint = fingerprint_documents(documents)
    key = _key(backend, path, fingerprint, opts)
    with _LOCK:
        if cache and key in _CACHE:
            return _CACHE[key]
        if path is not None and (path / MANIFEST).is_file() and not overwrite:
            read_manifest(path).check(path, backend, opts.get("model"), fingerprint)
            retriever = backend_class(backend).load(path, **opts)
        else:
            retriever = backend_class(backend).build(documents, path, fingerprint=fingerprint, **opts)
        if cache:
            _CACHE[key] = retriever
        return retriever


def load_retriever(index_dir: str | Path, *, backend: str | None = None, cache: bool = True, **opts: Any) -> Retriever:
    """Open a saved index with the backend named in its manifest (``backend=`` asserts which one it must be)."""
    path = Path(index_dir).resolve()
    manifest = read_manifest(path)
    manifest.check(path, backend or manifest.backend, opts.get("model"))
    key = _key(manifest.backend, path, manifest.fingerprint, opts)
    with _LOCK:
        if cache and key in _CACHE:
            return _CACHE[key]
        retriever = backend_class(manifest.backend).load(path, **opts)
        if cache:
            _CACHE[key] = retriever
        return retriever


def clear_retriever_cache() -> None:
    """Forget every cached retriever, so the next ``build_retriever`` makes a new one.

    They are not closed here: an env or a catalogue built earlier may still hold one and keeps a working retriever;
    each is freed when its last holder lets it go.
    """
    with _LOCK:
        _CACHE.clear()
