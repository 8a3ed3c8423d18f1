"""HotpotQA task sources: the official JSON, the Hugging Face layout (JSONL or the hub), and the generated KB.

Every source gives :class:`~agentgym_r1.core.tasks.Task` objects with ``prompt`` the question, ``answer`` the gold
answer and ``meta`` holding ``type``, ``level``, ``supporting_titles`` (the gold paragraphs' titles, in order of first
mention) and ``supporting_facts`` (``[[title, sentence_id], ...]``). The question contexts (title and sentences of
each paragraph) become the distractor-setting corpus (:func:`distractor_documents`).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_r1.core.difficulty import resolve
from agentgym_r1.core.hub import load_hf_dataset
from agentgym_r1.core.tasks import GeneratedSource, ListSource, Task, TaskSource
from agentgym_r1.envs.hotpotqa.synthetic import LEVELS, Knobs, build_kb, distractors, generate_question
from agentgym_r1.error import (
    ConfigError,
    DataFormatError,
    DataNotFoundError,
)
from agentgym_r1.retrieval.base import Document
from agentgym_r1.retrieval.corpus import hotpotqa_paragraphs

ALTERNATIVES = (
    'source="synthetic" (generated, offline), a path to the official JSON (hotpot_dev_distractor_v1.json '
    "from hotpotqa.github.io), or a JSONL file in the Hugging Face layout (one record per line with "
    '"question", "answer", "supporting_facts" and "context")'
)
HF_DATASET = "hotpotqa/hotpot_qa"
HF_CONFIGS = ("distractor", "fullwiki")


@dataclass(frozen=True)
class HotpotData:
    """A loaded source: its tasks, and the paragraphs of the question contexts (``None`` when it has none)."""

    tasks: TaskSource
    documents: tuple[Document, ...] | None
    key: str  # identifies the corpus, for the per-process index cache


def _supporting(record: Mapping[str, Any]) -> list[list[Any]]:
    facts = record.get("supporting_facts") or []
    if isinstance(facts, Mapping):  # HF layout: {"title": [...], "sent_id": [...]}
        return [[t, s] for t, s in zip(facts.get("title", []), facts.get("sent_id", []), strict=False)]
    return [list(f) for f in facts]


def task_from_record(record: Mapping[str, Any], index: int, where: str) -> Task:
    """A task from one HotpotQA record, in either layout."""
    if not isinstance(record, Mapping) or not isinstance(record.get("question"), str) or "answer" not in record:
        keys = sorted(record) if isinstance(record, Mapping) else type(record).__name__
        raise DataFormatError(
            f"{where}: a HotpotQA record needs 'question' and 'answer', got {keys}. Use {ALTERNATIVES}."
        )
    facts = _supporting(record)
    titles = list(dict.fromkeys(str(t) for t, _ in facts))
    answer = record["answer"]
    answer = [str(a) for a in answer] if isinstance(answer, list) else str(answer)
    task_id = str(record.get("_id", record.get("id", index)))
    meta = {
        "type": record.get("type", ""),
        "level": record.get("level", ""),
        "supporting_titles": titles,
        "supporting_facts": facts,
    }
    return Task(task_id, record["question"], answer, meta)


def build(records: Sequence[Mapping[str, Any]], where: str, key: str) -> HotpotData:
    """Tasks from the records; the distractor corpus from their contexts, unless a record has no context."""
    tasks = [task_from_record(record, i, f"{where} record {i}") for i, record in enumerate(records)]
    if not tasks:
        raise DataFormatError(f"{where} holds no questions. Use {ALTERNATIVES}.")
    with_context = all(record.get("context") for record in records)
    return HotpotData(ListSource(tasks), tuple(hotpotqa_paragraphs(records)) if with_context else None, key)


def _read_records(path: Path) -> list[Any]:
    try:
        return _read_utf8_records(path)
    except UnicodeDecodeError as e:
        raise DataFormatError(
            f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); HotpotQA files are UTF-8 "
            f"JSON. Re-encode it (e.g. iconv -t UTF-8) or use {ALTERNATIVES}."
        ) from e


def _read_utf8_records(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as f:
        head = f.read(1)
        while head.isspace():
            head = f.read(1)
        f.seek(0)
        if head == "[":  # the official layout: one JSON list
            try:
                return json.load(f)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path} is not valid JSON ({e.msg} at line {e.lineno})") from e
        records = []
        for i, line in enumerate(f):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataFormatError(
                        f"{path}:{i + 1} is neither a JSON list nor JSON lines ({e.msg}). Use {ALTERNATIVES}."
                    ) from e
        return records


@functools.lru_cache(maxsize=8)
def _load_file(path: str, mtime: float) -> HotpotData:
    return build(_read_records(Path(path)), path, f"file:{path}:{mtime}")


def load_file(path: str | os.PathLike[str]) -> HotpotData:
    """Questions from the official JSON (a list) or the HF layout as JSON lines; cached per path and mtime."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise DataNotFoundError(f"HotpotQA source {str(path)!r} is not a file. Use {ALTERNATIVES}.")
    return _load_file(str(p), p.stat().st_mtime)


@functools.lru_cache(maxsize=4)
def load_hf(split: str = "validation", config: str = "distractor") -> HotpotData:
    """``hotpotqa/hotpot_qa`` from the Hugging Face hub (downloaded and cached on first use online)."""
    if config not in HF_CONFIGS:
        raise DataFormatError(f"HotpotQA config must be one of {HF_CONFIGS}, got {config!r}")
    ds = load_hf_dataset(HF_DATASET, config, split, feature="HotpotQA source='hf'", alternatives=ALTERNATIVES)
    return build([dict(r) for r in ds], f"{HF_DATASET}/{config}/{split}", f"hf:{config}:{split}")


@functools.lru_cache(maxsize=8)
def synthetic(seed: int = 0, size: int = 1000, knobs: Knobs = LEVELS["easy"]) -> HotpotData:
    """The generated KB of ``(seed, size)``: unlimited questions at ``knobs``, one passage per entity as the
    corpus."""
    if not isinstance(size, int) or size < 40:
        raise ConfigError(f"kb_size must be an int of at least 40 entities, got {size!r}")
    kb = build_kb(seed, size)

    def make(index: int) -> Task:
        q = generate_question(seed, index, size, knobs)
        context = [*q.supporting, *distractors(seed, index, size, q.supporting)]
        meta = {
            "type": q.type,
            "level": "synthetic",
            "template": q.template,
            "supporting_titles": list(q.supporting),
            "supporting_facts": [[t, 0] for t in q.supporting],
            "context_titles": context,
        }
        return Task(f"synthetic-{seed}-{index}", q.question, q.answer, meta)

    docs = tuple(Document(str(i), title, text) for i, (title, text) in enumerate(kb.passages.items()))
    return HotpotData(GeneratedSource(make, f"synthetic-{seed}"), docs, f"synthetic:{seed}:{size}")


def difficulty_of(source: object, difficulty: object) -> tuple[str, Knobs]:
    """The level's label and knobs; a level other than ``easy`` is refused on a real source."""
    label, knobs = resolve('HotpotQA source="synthetic"', LEVELS, difficulty)
    if source != "synthetic" and label != "easy":
        raise ConfigError(
            f"difficulty is for source='synthetic'; the questions of {str(source)!r} are as they are "
            f"(got difficulty={difficulty!r})"
        )
    return label, knobs


def load_source(
    source: str | os.PathLike[str],
    split: str = "validation",
    config: str = "distractor",
    seed: int = 0,
    size: int = 1000,
    knobs: Knobs = LEVELS["easy"],
) -> HotpotData:
    if source == "synthetic":
        return synthetic(seed, size, knobs)
    if source == "hf":
        return load_hf(split, config)
    return load_file(source)
