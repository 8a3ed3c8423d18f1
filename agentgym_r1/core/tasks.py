"""Tasks and task sources: what an env plays, by index or by id, finite or generated without end."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_r1.error import ConfigError, DataFormatError

UNLIMITED_SIZE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Task:
    """One task: the prompt the agent sees, the gold answer, and anything else (``meta``: expert traces, ids)."""

    id: str
    prompt: str
    answer: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)


class TaskSource:
    """Tasks by index. ``size`` is ``None`` for a generator that makes a task for any index."""

    size: int | None = None

    def __getitem__(self, index: int) -> Task:
        raise NotImplementedError

    def by_id(self, task_id: str) -> Task:
        raise ConfigError(f"{type(self).__name__} cannot look tasks up by id; use options={{'index': i}}")

    def __len__(self) -> int:
        return UNLIMITED_SIZE if self.size is None else self.size


class ListSource(TaskSource):
    """A finite list of tasks, looked up by index or id."""

    def __init__(self, tasks: Iterable[Task | Mapping[str, Any]]) -> None:
        self.tasks: list[Task] = [t if isinstance(t, Task) else task_from_mapping(t, i) for i, t in enumerate(tasks)]
        if not self.tasks:
            raise ConfigError("the task list is empty; give at least one task")
        self.size = len(self.tasks)
        self._ids = {t.id: i for i, t in enumerate(self.tasks)}

    def __getitem__(self, index: int) -> Task:
        return self.tasks[index]

    def by_id(self, task_id: str) -> Task:
        if task_id not in self._ids:
            raise ConfigError(f"no task with id {task_id!r}; ids look like {self.tasks[0].id!r}")
        return self.tasks[self._ids[task_id]]


class GeneratedSource(TaskSource):
    """Tasks made on demand: ``make(index)`` must be a pure function of the index (seeded by it)."""

    def __init__(self, make: Callable[[int], Task], prefix: str) -> None:
        self.make, self.prefix = make, prefix

    def __getitem__(self, index: int) -> Task:
        return self.make(int(index))

    def by_id(self, task_id: str) -> Task:
        head, _, index = task_id.rpartition("-")
        if head != self.prefix or not index.isdigit():
            raise ConfigError(f"generated task ids look like '{self.prefix}-<index>', got {task_id!r}")
        return self.make(int(index))


def task_from_mapping(obj: Mapping[str, Any], index: int) -> Task:
    prompt = obj.get("prompt", obj.get("question"))
    if not isinstance(prompt, str):
        raise DataFormatError(f"task {index} has no string 'prompt' (or 'question'): keys are {sorted(obj)}")
    meta = {k: v for k, v in obj.items() if k not in ("id", "prompt", "question", "answer")}
    return Task(str(obj.get("id", index)), prompt, obj.get("answer"), meta)


def as_source(tasks: TaskSource | Sequence[Task | Mapping[str, Any]] | None) -> TaskSource:
    if isinstance(tasks, TaskSource):
        return tasks
    if tasks is None:
        raise ConfigError("no tasks given; pass tasks=[{'prompt': ..., 'answer': ...}, ...] or a TaskSource")
    return ListSource(tasks)
