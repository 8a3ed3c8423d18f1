"""Corpora: JSONL files (Search-R1's ``{"id", "contents"}`` or ``{"title", "text"}``), HotpotQA contexts,
fingerprints."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentgym_r1.error import DataFormatError, DataNotFoundError
from agentgym_r1.retrieval.base import Document

__all__ = [
    "fingerprint_documents",
    "fingerprint_file",
    "hotpotqa_paragraphs",
    "iter_corpus",
    "load_corpus",
    "record_to_document",
]

_CHUNK = 1 << 20


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` items (the last may be shorter): documents fed to an indexer a batch at a time."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def record_to_document(record: Any, line: int, source: str | Path = "<records>") -> Document:
    """One corpus record as a :class:`Document`; a record in neither known layout raises :class:`DataFormatError`."""
    if not isinstance(record, Mapping):
        raise DataFormatError(
            f"{source}, record {line}: expected a JSON object, got {type(record).__name__}. "
            'A corpus line is {"id", "contents"} (Search-R1 wiki-18) or {"title", "text"}.'
        )
    doc_id = str(record.get("id", record.get("_id", line)))
    if "contents" in record and "text" not in record:
        title, _, text = str(record["contents"]).partition("\n")
        return Document(doc_id, title.strip().strip('"'), text)
    if "text" in record:
        return Document(doc_id, str(record.get("title", "")), str(record["text"]))
    raise DataFormatError(
        f"{source}, record {line}: keys {sorted(record)[:8]} are not a known corpus layout. "
        'A corpus line is {"id", "contents"} (Search-R1 wiki-18) or {"title", "text"} (optional "id").'
    )


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"corpus file {str(path)!r} does not exist. Give a JSONL file of "
            '{"id", "contents"} or {"title", "text"} records.'
        )
    return path


def iter_corpus(path: str | Path) -> Iterator[Document]:
    """Stream the documents of a JSONL corpus file (one JSON object per line; blank lines skipped)."""
    path = _existing(path)
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(
                    f"{path}, line {n + 1}: not JSON ({e.msg}). A corpus is JSONL, one "
                    'object per line: {"id", "contents"} or {"title", "text"}.'
                ) from e
            yield record_to_document(record, n, path)


def load_corpus(path: str | Path) -> list[Document]:
    """All the documents of a JSONL corpus file."""
    return list(iter_corpus(path))


def fingerprint_documents(documents: Iterable[Document]) -> str:
    """A content hash of a corpus (ids, titles and texts, in order)."""
    h = hashlib.sha256()
    for d in documents:
        h.update(f"{d.id}\x1f{d.title}\x1f{d.text}\x1e".encode())
    return "docs:" + h.hexdigest()[:32]


def fingerprint_file(path: str | Path) -> str:
    """A hash of a corpus file's bytes (cheaper than parsing it)."""
    h = hashlib.sha256()
    with _existing(path).open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return "file:" + h.hexdigest()[:32]


def hotpotqa_paragraphs(records: Iterable[Mapping[str, Any]]) -> list[Document]:
    """The distractor-setting corpus: the context paragraphs of HotpotQA questions, deduplicated by title.

    Takes records in the Hugging Face layout (``context = {"title": [...], "sentences": [[...]]}``) or the official
    one (``context = [[title, [sentences]], ...]``). The document id is the title; the text joins the sentences.
    """
    seen: dict[str, Document] = {}
    for record in records:
        ctx = record.get("context")
        if isinstance(ctx, Mapping):
            pairs = zip(ctx.get("title", []), ctx.get("sentences", []), strict=False)
        elif isinstance(ctx, list):
            pairs = ((p[0], p[1]) for p in ctx)
        else:
            raise DataFormatError(
                f"HotpotQA record {record.get('id', record.get('_id'))!r} has no 'context' "
                "in the Hugging Face or official layout."
            )
        for title, sentences in pairs:
            if title not in seen:
                seen[title] = Document(str(title), str(title), "".join(sentences).strip())
    return list(seen.values())
