"""build_retriever / load_retriever: build once, load after, share per process, refuse mismatched indexes."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentgym_r1.error import (
    ConfigError,
    DataFormatError,
    DataNotFoundError,
    IndexMismatchError,
    IndexNotFoundError,
)
from agentgym_r1.retrieval import build_retriever, clear_retriever_cache, load_corpus, load_retriever
from agentgym_r1.retrieval.manifest import read_manifest
from tests.retrieval.conftest import QUERIES, SMALL_DOCS

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("tantivy")


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_retriever_cache()
    yield
    clear_retriever_cache()


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_index_is_built_once_then_loaded(tmp_path):
    idx = tmp_path / "idx"
    first = build_retriever("bm25", SMALL_DOCS, idx, cache=False)
    manifest = read_manifest(idx)
    assert (manifest.backend, manifest.num_docs) == ("bm25", len(SMALL_DOCS))
    assert manifest.fingerprint.startswith("docs:")
    stamp = (idx / "manifest.json").stat().st_mtime_ns
    second = build_retriever("bm25", SMALL_DOCS, idx, cache=False)
    assert second is not first
    assert (idx / "manifest.json").stat().st_mtime_ns == stamp  # loaded, not rebuilt
    assert second.search("coral reef")[0].doc.id == "d6"


def test_one_retriever_per_index_per_process(tmp_path):
    a = build_retriever("bm25", SMALL_DOCS, tmp_path / "idx")
    b = build_retriever("bm25", list(SMALL_DOCS), tmp_path / "idx")
    c = load_retriever(tmp_path / "idx")
    assert a is b is c
    assert build_retriever("bm25", SMALL_DOCS) is build_retriever("bm25", SMALL_DOCS)
    assert build_retriever("bm25", SMALL_DOCS[:3]) is not build_retriever("bm25", SMALL_DOCS)


def test_other_corpus_in_same_dir_raises_unless_overwrite(tmp_path):
    build_retriever("bm25", SMALL_DOCS, tmp_path / "idx", cache=False)
    with pytest.raises(IndexMismatchError, match="overwrite=True"):
        build_retriever("bm25", SMALL_DOCS[:4], tmp_path / "idx", cache=False)
    r = build_retriever("bm25", SMALL_DOCS[:4], tmp_path / "idx", cache=False, overwrite=True)
    assert len(r) == 4


def test_load_with_other_backend_raises(tmp_path):
    build_retriever("bm25", SMALL_DOCS, tmp_path / "idx", cache=False)
    with pytest.raises(IndexMismatchError, match="built with backend 'bm25'"):
        load_retriever(tmp_path / "idx", backend="dense")
    with pytest.raises(IndexMismatchError):
        build_retriever("lucene", SMALL_DOCS, tmp_path / "idx", cache=False)


def test_unknown_backend_and_missing_index_raise(tmp_path):
    with pytest.raises(ConfigError, match="unknown retrieval backend 'elastic'"):
        build_retriever("elastic", SMALL_DOCS)
    with pytest.raises(IndexNotFoundError):
        load_retriever(tmp_path / "none")


def test_corpus_files_in_both_layouts(tmp_path):
    wiki = _write_jsonl(
        tmp_path / "wiki.jsonl",
        [
            {"id": "1", "contents": '"Ada Lovelace"\nShe wrote an algorithm.'},
            {"id": "2", "contents": '"Kilimanjaro"\nA volcano in Tanzania.'},
        ],
    )
    titled = _write_jsonl(
        tmp_path / "t.jsonl",
        [
            {"title": "Ada Lovelace", "text": "She wrote an algorithm."},
            {"title": "Kilimanjaro", "text": "A volcano in Tanzania."},
        ],
    )
    docs = load_corpus(wiki)
    assert [(d.id, d.title, d.text) for d in docs] == [
        ("1", "Ada Lovelace", "She wrote an algorithm."),
        ("2", "Kilimanjaro", "A volcano in Tanzania."),
    ]
    assert [(d.title, d.text) for d in load_corpus(titled)] == [(d.title, d.text) for d in docs]
    r = build_retriever("bm25", wiki, tmp_path / "idx")
    assert r.search("volcano")[0].doc.title == "Kilimanjaro"
    assert read_manifest(tmp_path / "idx").fingerprint.startswith("file:")


@pytest.mark.parametrize("line", ['{"question": "q", "answer": "a"}', "[1, 2]", "not json"])
def test_unknown_corpus_format_raises(tmp_path, line):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="contents"):
        build_retriever("bm25", path)


def test_missing_corpus_file_raises(tmp_path):
    with pytest.raises(DataNotFoundError):
        build_retriever("bm25", tmp_path / "missing.jsonl")


def test_importing_retrieval_loads_no_backend():
    code = (
        "import sys, agentgym_r1.retrieval; "
        "print(sorted(m for m in ('tantivy', 'faiss', 'torch', 'httpx', 'fastapi', 'jnius', 'pyserini', "
        "'sentence_transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_shared_retriever_answers_many_threads():
    retriever = build_retriever("bm25", SMALL_DOCS)
    with ThreadPoolExecutor(8) as pool:
        tops = list(pool.map(lambda q: retriever.search(q, 1)[0].doc.id, [q for q, _ in QUERIES] * 8))
    assert tops == [doc_id for _, doc_id in QUERIES] * 8
