"""Lucene BM25 through pyserini (extra ``lucene``; needs Java 17+): the Search-R1 / Anserini baseline.

The index is built with Anserini's ``IndexCollection`` (``JsonCollection``, default Lucene English analyzer, raw
documents stored) in a subprocess, so its logging never reaches the caller, and searched in-process with
Anserini's ``SimpleSearcher`` (BM25 with pyserini's k1=0.9, b=0.4). Anserini builds a bag-of-words query from the
analyzed text (no query-parser syntax); queries are cut to ``MAX_QUERY_WORDS`` words so Lucene's clause limit is never
reached.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from agentgym_r1.error import ConfigError, RetrievalError, require
from agentgym_r1.retrieval.base import Document, Hit, Retriever, as_documents
from agentgym_r1.retrieval.corpus import batched
from agentgym_r1.retrieval.manifest import IndexManifest, read_manifest, write_manifest

__all__ = ["MAX_QUERY_WORDS", "LuceneRetriever"]

MAX_QUERY_WORDS = 64
_LUCENE_DIR = "lucene"
_WORD = re.compile(r"\w+")


def _searcher_class():
    # Anserini's SimpleSearcher through pyserini's classpath set-up. pyserini.search.lucene is avoided: it imports
    # pyserini.encode, which builds an OpenAI client at import time and fails without an API key.
    pyclass = require("pyserini.pyclass", "lucene", "The Lucene (pyserini) retriever")
    return pyclass.autoclass("io.anserini.search.SimpleSearcher")


def _write_collection(documents: Iterable[Document | dict], folder: Path) -> int:
    n = 0
    with (folder / "docs.jsonl").open("w", encoding="utf-8") as f:
        for start_batch in batched(documents, 4096):
            for d in as_documents(start_batch):
                f.write(json.dumps({"id": d.id, "contents": f"{d.title}\n{d.text}"}, ensure_ascii=False) + "\n")
                n += 1
    return n


class LuceneRetriever(Retriever):
    """BM25 over a Lucene index built by pyserini. Always on disk (``index_dir`` is required)."""

    backend = "lucene"

    def __init__(self, index_dir: Path, k1: float = 0.9, b: float = 0.4) -> None:
        self.index_dir = index_dir
        self._searcher = _searcher_class()(str(index_dir / _LUCENE_DIR))
        self._searcher.set_bm25(float(k1), float(b))

    @classmethod
    def build(
        cls,
        documents: Iterable[Document | dict],
        index_dir: str | Path | None = None,
        *,
        fingerprint: str | None = None,
        threads: int = 2,
        k1: float = 0.9,
        b: float = 0.4,
    ) -> LuceneRetriever:
        """Index ``documents`` into ``index_dir`` (replaced) with Anserini's indexer."""
        if index_dir is None:
            raise ConfigError("the lucene backend keeps its index on disk: give index_dir=...")
        require("pyserini", "lucene", "The Lucene (pyserini) retriever")
        path = Path(index_dir)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        with tempfile.TemporaryDirectory(dir=path) as tmp:
            n = _write_collection(documents, Path(tmp))
            cmd = [
                sys.executable,
                "-m",
                "pyserini.index.lucene",
                "--collection",
                "JsonCollection",
                "--input",
                tmp,
                "--index",
                str(path / _LUCENE_DIR),
                "--generator",
                "DefaultLuceneDocumentGenerator",
                "--threads",
                str(threads),
                "--storeRaw",
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not (path / _LUCENE_DIR).is_dir():
            raise RetrievalError(
                f"pyserini's indexer failed (exit {proc.returncode}) on {n} documents: "
                f"{(proc.stderr or proc.stdout)[-800:]}"
            )
        write_manifest(path, IndexManifest(cls.backend, fingerprint or "", n, options={"k1": k1, "b": b}))
        return cls(path, k1, b)

    @classmethod
    def load(cls, index_dir: str | Path, *, threads: int = 2, k1: float = 0.9, b: float = 0.4) -> LuceneRetriever:
        """Open an index saved by :meth:`build` (Lucene memory-maps its files)."""
        path = Path(index_dir)
        read_manifest(path).check(path, cls.backend)
        return cls(path, k1, b)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        if self._searcher is None:
            raise RetrievalError("this Lucene retriever was closed")
        words = _WORD.findall(str(query)[: 4 * MAX_QUERY_WORDS * 16])[:MAX_QUERY_WORDS]
        if not words or k <= 0:
            return []
        try:
            hits = self._searcher.search(" ".join(words), min(int(k), max(1, len(self))))
            return [
                Hit(self._document(h.docid, h.lucene_document.get("raw")), float(h.score), rank)
                for rank, h in enumerate(hits)
            ]
        except Exception as e:  # a Java exception surfaces as jnius.JavaException
            raise RetrievalError(f"Lucene search failed: {e}") from e

    @staticmethod
    def _document(docid: str, raw: str | None) -> Document:
        contents = json.loads(raw)["contents"] if raw else ""
        title, _, text = contents.partition("\n")
        return Document(str(docid), title, text)

    def __len__(self) -> int:
        return int(self._searcher.get_total_num_docs())

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None
