"""The difficulty resolver shared by the generated sources."""

from __future__ import annotations

import dataclasses

import pytest

from agentgym_r1.core.difficulty import resolve
from agentgym_r1.error import ConfigError


@dataclasses.dataclass(frozen=True)
class Knobs:
    size: int = 1
    noise: float = 0.0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ConfigError(f"size must be at least 1, got {self.size}")


PRESETS = {"easy": Knobs(), "medium": Knobs(2, 0.1), "hard": Knobs(3, 0.5)}


def test_levels_dicts_and_knobs_resolve_to_a_label_and_knobs():
    assert resolve("toy", PRESETS, "medium") == ("medium", Knobs(2, 0.1))
    assert resolve("toy", PRESETS, {"size": 3, "noise": 0.5}) == ("hard", Knobs(3, 0.5))
    assert resolve("toy", PRESETS, {"noise": 0.2}) == ("custom", Knobs(1, 0.2))
    assert resolve("toy", PRESETS, Knobs()) == ("easy", Knobs())


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(
        ConfigError,
        match=r"unknown difficulty 'expert' for toy; choose one of \['easy', 'medium', "
        r"'hard'\], or a dict of its knobs \['size', 'noise'\]",
    ):
        resolve("toy", PRESETS, "expert")
    with pytest.raises(ConfigError, match=r"unknown difficulty knob\(s\) \['sise'\] for toy; its knobs are"):
        resolve("toy", PRESETS, {"sise": 2})
    with pytest.raises(ConfigError, match="size must be at least 1"):
        resolve("toy", PRESETS, {"size": 0})
