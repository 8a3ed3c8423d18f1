"""Text spaces that accept any Unicode string up to a length bound.

Gymnasium's :class:`~gymnasium.spaces.Text` only contains strings over its charset (alphanumeric by default), so a
model's action with a ``<`` or a newline would not be in the action space and ``check_env`` would fail.
"""

from __future__ import annotations

import re
import string
from typing import Any

import numpy as np
from gymnasium import spaces

# What ``sample`` draws from: printable ASCII, whitespace and a few non-ASCII letters and symbols.
SAMPLE_CHARSET = string.printable + "éüßøπλ中文→…✓"

DEFAULT_MAX_OBSERVATION = 1_000_000
DEFAULT_MAX_ACTION = 100_000

_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_safe(text: str) -> str:
    """``text`` with each lone surrogate (``"\\ud800"`` read from a JSON escape) replaced by U+FFFD, so it can be
    written as UTF-8. A Python ``str`` holds a surrogate only unpaired: JSON readers join an escaped pair into one
    character. The text is copied only when it holds one."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


class UnicodeText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` whose ``contains`` accepts any ``str`` of at most ``max_length`` chars.

    ``sample`` still draws from :data:`SAMPLE_CHARSET`, with lengths up to ``sample_max_length`` (short by default, so
    random-action checks stay fast).
    """

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        sample_max_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ):
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)
        self.sample_max_length = min(sample_max_length, max_length)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
        idx = self.np_random.integers(0, len(self.character_list), size=length)
        return "".join(self.character_list[i] for i in idx)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )
