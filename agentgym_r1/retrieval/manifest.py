"""The manifest saved beside every index: which backend and model built it, over which corpus."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgym_r1.error import IndexMismatchError, IndexNotFoundError

__all__ = ["MANIFEST", "IndexManifest", "read_manifest", "write_manifest"]

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


@dataclass
class IndexManifest:
    """``backend`` (bm25, lucene, dense, hybrid), embedding ``model`` (dense only), corpus ``fingerprint``, doc
    count."""

    backend: str
    fingerprint: str
    num_docs: int
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    version: int = FORMAT_VERSION

    def check(
        self, index_dir: str | Path, backend: str, model: str | None = None, fingerprint: str | None = None
    ) -> None:
        """Raise :class:`IndexMismatchError` when this index is not the one asked for."""
        if self.backend != backend:
            raise IndexMismatchError(
                f"index {str(index_dir)!r} was built with backend {self.backend!r}, not "
                f"{backend!r}. Load it with backend={self.backend!r}, or build a {backend} index "
                "in another directory."
            )
        if model is not None and self.model is not None and _model_name(model) != _model_name(self.model):
            raise IndexMismatchError(
                f"index {str(index_dir)!r} was built with embedding model {self.model!r}, not "
                f"{model!r}. Query vectors from another model do not match; use the same model "
                "or build a new index in another directory."
            )
        if fingerprint is not None and self.fingerprint != fingerprint:
            raise IndexMismatchError(
                f"index {str(index_dir)!r} holds another corpus (fingerprint {self.fingerprint}, "
                f"asked for {fingerprint}). Pass overwrite=True to rebuild it, or use another "
                "directory."
            )


def _model_name(model: str) -> str:
    return Path(model).name or model


def write_manifest(index_dir: str | Path, manifest: IndexManifest) -> None:
    path = Path(index_dir) / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(manifest), indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def read_manifest(index_dir: str | Path) -> IndexManifest:
    path = Path(index_dir) / MANIFEST
    if not path.is_file():
        raise IndexNotFoundError(
            f"no retrieval index at {str(index_dir)!r} (no {MANIFEST}). Build one with "
            "agentgym_r1.retrieval.build_retriever(backend, corpus, index_dir=...)."
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    known = IndexManifest.__dataclass_fields__
    return IndexManifest(**{k: v for k, v in data.items() if k in known})
