"""GSM8K task sources: the official JSONL files, the Hugging Face dataset, and a procedural generator."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from agentgym_r1.core.hub import load_hf_dataset
from agentgym_r1.core.tasks import GeneratedSource, ListSource, Task, TaskSource
from agentgym_r1.envs.gsm8k.synthetic import generate_problem
from agentgym_r1.error import ConfigError, DataFormatError, DataNotFoundError

_ANNOTATION = re.compile(r"<<([^=<>]+)=([^<>]*)>>")
ALTERNATIVES = ('source="synthetic" (generated, offline), or source="path/to/test.jsonl" in the official format '
                "(github.com/openai/grade-school-math, grade_school_math/data/test.jsonl)")


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
    return Task(task_id, record["question"], gold_answer(record["answer"]),
                {"solution": record["answer"], "expert": expert})


@functools.lru_cache(maxsize=8)
def load_jsonl(path: str) -> ListSource:
    p = Path(path)
    if not p.is_file():
        raise DataNotFoundError(f"GSM8K source {path!r} is not a file. Use {ALTERNATIVES}.")
    try:
        lines = p.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise DataFormatError(f"GSM8K source {path!r} is not UTF-8 text ({e.reason} at byte {e.start}); the official "
                              f"files are UTF-8 JSONL. Re-encode it (e.g. iconv -t UTF-8) or use {ALTERNATIVES}.") from e
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


@functools.lru_cache(maxsize=16)
def synthetic_source(seed: int = 0, min_steps: int = 2, max_steps: int = 4) -> GeneratedSource:
    for name, value in (("min_steps", min_steps), ("max_steps", max_steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive int, got {value!r}")
    if min_steps > max_steps:
        raise ConfigError(f"min_steps ({min_steps}) is more than max_steps ({max_steps}); give min_steps <= max_steps")
    def make(index: int) -> Task:
        p = generate_problem(seed, index, min_steps, max_steps)
        return Task(f"synthetic-{seed}-{index}", p.question, p.answer, {"expert": p.expressions, "steps": len(p.expressions)})

    return GeneratedSource(make, f"synthetic-{seed}")


def load_source(source: str, split: str = "test", seed: int = 0, min_steps: int = 2, max_steps: int = 4) -> TaskSource:
    if source == "synthetic":
        return synthetic_source(seed, min_steps, max_steps)
    if source == "hf":
        return load_hf(split)
    return load_jsonl(str(Path(source).expanduser().resolve()))
