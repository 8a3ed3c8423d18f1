"""A document store on disk for backends whose index keeps only vectors (dense): JSONL plus an offsets array.

The JSONL file and the offsets are memory-mapped on load, so a process holds only the pages it reads.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from agentgym_r1.retrieval.base import Document

__all__ = ["DocStore"]

_DOCS = "docs.jsonl"
_OFFSETS = "docs.offsets.npy"


class DocStore:
    """Documents by position: ``store[i]`` is the i-th document given to :meth:`write`."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        self._offsets = np.load(folder / _OFFSETS, mmap_mode="r")
        self._file = (folder / _DOCS).open("rb")
        size = (folder / _DOCS).stat().st_size
        self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    @staticmethod
    def write(documents: Iterable[Document], folder: str | Path) -> int:
        """Write ``documents`` into ``folder``; returns how many."""
        folder = Path(folder)
        offsets = [0]
        with (folder / _DOCS).open("wb") as f:
            for d in documents:
                f.write(json.dumps([d.id, d.title, d.text], ensure_ascii=False).encode() + b"\n")
                offsets.append(f.tell())
        np.save(folder / _OFFSETS, np.asarray(offsets, dtype=np.int64))
        return len(offsets) - 1

    def __getitem__(self, i: int) -> Document:
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        doc_id, title, text = json.loads(self._mm[start:end])
        return Document(doc_id, title, text)

    def many(self, ids: Sequence[int]) -> list[Document]:
        return [self[i] for i in ids]

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def close(self) -> None:
        if isinstance(self._mm, mmap.mmap):
            self._mm.close()
        self._file.close()
