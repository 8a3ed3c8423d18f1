"""Difficulty levels of the generated sources: ``easy``, ``medium``, ``hard``, or a dict of a generator's knobs.

Each generator defines its knobs as a frozen dataclass that checks itself in ``__post_init__`` (a knob out of range,
or a combination that could make an unsolvable task, raises :class:`ConfigError` at construction) and a preset per
level. :func:`resolve` turns what the user gave into ``(label, knobs)``: a level name picks its preset; a dict
overrides the ``easy`` preset's knobs (the label is the level whose preset it equals, else ``"custom"``). ``easy`` is
every generator's default and its original behaviour, so seeds and figures from before levels existed keep their
meaning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from agentgym_r1.error import ConfigError

LEVELS = ("easy", "medium", "hard")
K = TypeVar("K")


def knob_names(knobs_type: type) -> list[str]:
    return [f.name for f in dataclasses.fields(knobs_type)]


def resolve(source: str, presets: Mapping[str, K], difficulty: Any) -> tuple[str, K]:
    """``(label, knobs)`` for ``difficulty`` (a level name, a dict of knobs, or knobs) of ``source``'s generator."""
    knobs_type = type(presets["easy"])
    names = knob_names(knobs_type)
    if isinstance(difficulty, knobs_type):
        knobs = difficulty
    elif isinstance(difficulty, str):
        if difficulty not in presets:
            raise ConfigError(
                f"unknown difficulty {difficulty!r} for {source}; choose one of {list(presets)}, or a "
                f"dict of its knobs {names}"
            )
        return difficulty, presets[difficulty]
    elif isinstance(difficulty, Mapping):
        unknown = sorted(str(k) for k in difficulty if k not in names)
        if unknown:
            raise ConfigError(
                f"unknown difficulty knob(s) {unknown} for {source}; its knobs are {names} (levels: {list(presets)})"
            )
        knobs = dataclasses.replace(presets["easy"], **difficulty)  # type: ignore[type-var]
    else:
        raise ConfigError(
            f"difficulty for {source} must be one of {list(presets)} or a dict of the knobs {names}, got {difficulty!r}"
        )
    label = next((name for name, preset in presets.items() if preset == knobs), "custom")
    return label, knobs


def check_int(source: str, name: str, value: Any, low: int, high: int) -> None:
    """:class:`ConfigError` unless ``value`` is an int in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{source} difficulty knob {name} must be an int in [{low}, {high}], got {value!r}")


def check_rate(source: str, name: str, value: Any) -> None:
    """:class:`ConfigError` unless ``value`` is a probability."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{source} difficulty knob {name} must be a number in [0, 1], got {value!r}")


def check_order(low_name: str, low: int, high_name: str, high: int) -> None:
    """:class:`ConfigError` when a knob's lower bound is above its upper bound."""
    if low > high:
        raise ConfigError(f"{low_name} ({low}) is more than {high_name} ({high}); give {low_name} <= {high_name}")
