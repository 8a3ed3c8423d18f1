"""The results journal: one JSON object a line beside the database, and the checks a line passes before it is replayed.

A line is ``{"run": RunMeta}`` (a run began or changed status), ``{"run": RunMeta, "episode": EpisodeRecord}`` (an
episode finished) or ``{"training": TrainingRecord}``. Replaying rebuilds the database from them, so a line is checked
field by field before any of it is stored: every field of its record is of the declared type, integers fit SQLite's
64-bit INTEGER and are not negative, numbers are finite (a ``NaN`` reward is stored as NULL and a ``NaN`` metric
breaks every board drawn from it), and nothing unknown is there. A line that fails is skipped and counted with its
reason; the lines after it are replayed.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["CHECKS", "BadLine", "BadLines", "check_record", "finite_metrics", "read_journal"]

R = TypeVar("R")
INT64_MAX = 2**63 - 1
SHOWN_PROBLEMS = 3  # the first few bad lines are named in the recovery message


class BadLine(ValueError):
    """A journal line that cannot be replayed; the message says which field and why."""


def _int(v: Any) -> bool:
    return type(v) is int and 0 <= v <= INT64_MAX


def _finite(v: Any) -> bool:  # an int past float range would raise in math.isfinite and in float()
    return (type(v) is float and math.isfinite(v)) or (type(v) is int and abs(v) <= INT64_MAX)


def _str(v: Any) -> bool:
    return type(v) is str


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _metrics(v: Any) -> bool:
    return type(v) is dict and all(_str(k) and (type(x) is bool or _finite(x)) for k, x in v.items())


def _curve(v: Any) -> bool:
    return type(v) is list and all(type(p) is list and all(_finite(x) for x in p) for p in v)


# Every annotation the journaled records use (a test runs over all their fields, so a new field with a new type
# cannot slip through unchecked).
CHECKS: dict[str, Callable[[Any], bool]] = {
    "str": _str,
    "str | None": _optional(_str),
    "int": _int,
    "float": _finite,
    "bool": lambda v: type(v) is bool,
    "dict[str, float]": _metrics,
    "list[list[float]]": _curve,
    "dict[str, Any]": lambda v: type(v) is dict,
}


def check_record(cls: Callable[..., R], data: Any) -> R:
    """``cls(**data)`` for a journaled dataclass, after checking every field; :class:`BadLine` names the first that
    is wrong (or unknown, or missing without a default)."""
    if type(data) is not dict:
        raise BadLine(f"{cls.__name__} is a {type(data).__name__}, not an object")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise BadLine(f"{cls.__name__} has unknown field(s) {unknown}")
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise BadLine(f"{cls.__name__}.{name} is missing")
            continue
        check = CHECKS[str(f.type)]
        if not check(data[name]):
            raise BadLine(f"{cls.__name__}.{name} = {_short(data[name])} is not a valid {f.type}")
    return cls(**data)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def finite_metrics(metrics: Any) -> tuple[dict[str, Any], list[str]]:
    """``metrics`` with its numbers as plain floats (numpy's too) and bools kept, without the values that are not
    finite numbers; and the names of those left out (``["metrics"]`` when it is not a dict at all)."""
    if not isinstance(metrics, dict):
        return {}, ["metrics"]
    kept: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            kept[str(k)] = v
        elif isinstance(v, numbers.Real):
            try:
                number = float(v)
            except OverflowError:  # an int past float range
                continue
            if math.isfinite(number):
                kept[str(k)] = number
    return kept, [str(k) for k in metrics if str(k) not in kept]


@dataclass
class BadLines:
    """The journal lines a replay skipped: how many, and the first few with their line number and reason."""

    count: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, lineno: int, reason: str) -> None:
        self.count += 1
        if len(self.problems) < SHOWN_PROBLEMS:
            self.problems.append(f"line {lineno}: {reason}")

    def describe(self) -> str:
        more = f"; {self.count - len(self.problems)} more" if self.count > len(self.problems) else ""
        return f"{self.count} unreadable journal line(s) skipped: {'; '.join(self.problems)}{more}"

    def __str__(self) -> str:  # the recovery message's tail: nothing when no line was skipped
        return f" ({self.describe()})" if self.count else ""


def read_journal(path: Path, bad: BadLines) -> Iterator[tuple[int, dict[str, Any]]]:
    """The journal's lines as (line number, object), in order; a line that is not a JSON object is counted in ``bad``
    and skipped. ``NaN`` and ``Infinity`` are refused at parsing (``parse_constant``), whatever field they stand in."""
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            try:
                entry = json.loads(line, parse_constant=_no_constant)
            except (ValueError, RecursionError) as e:
                bad.add(lineno, f"not JSON ({_short(str(e))})")
                continue
            if type(entry) is not dict:
                bad.add(lineno, f"a JSON {type(entry).__name__}, not an object")
                continue
            yield lineno, entry


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")
