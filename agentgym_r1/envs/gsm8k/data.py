"""GSM8K task sources: the official JSONL files, the Hugging Face dataset, and a procedural generator."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any

from agentgym_r1.core.difficulty import resolve
from agentgym_r1.core.hub import load_hf_dataset
from agentgym_r1.core.tasks import GeneratedSource, ListSource, Task, TaskSource
from agentgym_r1.envs.gsm8k.synthetic import LEVELS, Knobs, generate_problem
from agentgym_r1.error import DataFormatError, DataNotFoundError

_ANNOTATION = re.compile(r"<<([^=<>]+)=([^<>]*)>>")
ALTERNATIVES = (
    'source="synthetic" (generated, offline), or source="path/to/test.jsonl" in the official format '
    "(github.com/openai/grade-school-math, grade_school_math/data/test.jsonl)"
)


def gold_answer(solution: str) -> str:
    """The number after ``####`` in an official GSM8K solution, commas removed."""
    _, sep, tail = solution.rpartition("####")
    if not sep:
        raise DataFormatError("a GSM8K answer must end with '#### <number>'")
    return tail.strip().replace(",", "")


def task_from_record(record: dict[str, Any], task_id: str) -> Task:
    """A task from ``{"question", "answer"}``; the ``<<expr=value>>`` annotations become the expert trace."""
    if not isinstance(record.get("question"), str) or not isinstance(record.get("answer"), str):
        raise DataFormatError(f"GSM8K record {task_id} needs string 'question' and 'answer', got keys {sorted(record)}")
    expert = [expr.strip() for expr, _ in _ANNOTATION.findall(record["answer"])]
    return Task(
        task_id, record["question"], gold_answer(record["answer"]), {"solution": record["answer"], "expert": expert}
    )


@functools.lru_cache(maxsize=8)
def load_jsonl(path: str) -> ListSource:
    p = Path(path)
    if not p.is_file():
        raise DataNotFoundError(f"GSM8K source {path!r} is not a file. Use {ALTERNATIVES}.")
    try:
        lines = p.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise DataFormatError(
            f"GSM8K source {path!r} is not UTF-8 text ({e.reason} at byte {e.start}); the official "
            f"files are UTF-8 JSONL. Re-encode it (e.g. iconv -t UTF-8) or use {ALTERNATIVES}."
        ) from e
    tasks = []
    for i, line in enumerate(lines):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path}:{i + 1} is not a JSON line ({e.msg})") from e
            tasks.append(task_from_record(record, f"{p.stem}-{i}"))
    return ListSource(tasks)


@functools.lru_cache(maxsize=4)
def load_hf(split: str, dataset: str = "openai/gsm8k") -> ListSource:
    ds = load_hf_dataset(dataset, "main", split, feature="GSM8K source='hf'", alternatives=ALTERNATIVES)
    return ListSource(task_from_record(dict(r), f"gsm8k-{split}-{i}") for i, r in enumerate(ds))


def synthetic_knobs(
    difficulty: Any = "easy", min_steps: int | None = None, max_steps: int | None = None
) -> tuple[str, Knobs]:
    """The level's label and knobs, with ``min_steps``/``max_steps`` (when given) over the level's own."""
    label, knobs = resolve('GSM8K source="synthetic"', LEVELS, difficulty)
    steps = {k: v for k, v in (("min_steps", min_steps), ("max_steps", max_steps)) if v is not None}
    if steps:
        knobs = Knobs(**{**dataclasses.asdict(knobs), **steps})
        label = next((name for name, preset in LEVELS.items() if preset == knobs), "custom")
    return label, knobs


@functools.lru_cache(maxsize=16)
def synthetic_source(seed: int = 0, knobs: Knobs = LEVELS["easy"]) -> GeneratedSource:
    def make(index: int) -> Task:
        p = generate_problem(seed, index, knobs=knobs)
        return Task(
            f"synthetic-{seed}-{index}", p.question, p.answer, {"expert": p.expressions, "steps": len(p.expressions)}
        )

    return GeneratedSource(make, f"synthetic-{seed}")


def load_source(source: str, split: str = "test", seed: int = 0, knobs: Knobs = LEVELS["easy"]) -> TaskSource:
    if source == "synthetic":
        return synthetic_source(seed, knobs)
    if source == "hf":
        return load_hf(split)
    return load_jsonl(str(Path(source).expanduser().resolve()))
