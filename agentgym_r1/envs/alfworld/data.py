"""ALFWorld game sources: a data directory in the official layout, and games generated on demand."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from agentgym_r1.core.difficulty import resolve
from agentgym_r1.core.tasks import GeneratedSource, ListSource, Task, TaskSource
from agentgym_r1.envs.alfworld.engine import CompiledGame
from agentgym_r1.envs.alfworld.generator import (
    LEVELS,
    TASK_TYPES,
    Knobs,
    generate,
    normalise_task_types,
    task_type_of,
)
from agentgym_r1.error import ConfigError, DataNotFoundError

SPLITS = ("train", "valid_seen", "valid_unseen")
GAME_FILE = "game.tw-pddl"
DOWNLOAD_HINT = (
    'Download the games with `alfworld-download` (installed by pip install "agentgym-r1[alfworld]"); '
    "it writes them to $ALFWORLD_DATA (default ~/.cache/alfworld). Or pass source=<path to that "
    'directory>, or source="generated" for games generated offline.'
)


def data_root(source: str) -> Path:
    """The directory of ``source``: ``"alfworld"`` means ``$ALFWORLD_DATA`` (default ``~/.cache/alfworld``)."""
    if source == "alfworld":
        root = os.environ.get("ALFWORLD_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "alfworld")
        where = "$ALFWORLD_DATA" if os.environ.get("ALFWORLD_DATA") else "the default ~/.cache/alfworld"
        if not os.path.isdir(root):
            raise DataNotFoundError(f"no ALFWorld data at {root!r} ({where}). {DOWNLOAD_HINT}")
        return Path(root)
    root = Path(source).expanduser()
    if not root.is_dir():
        raise DataNotFoundError(f"ALFWorld source {source!r} is not a directory. {DOWNLOAD_HINT}")
    return root


def split_dir(root: Path, split: str) -> Path:
    """``root/json_2.1.1/<split>``, also accepting ``root`` = ``json_2.1.1`` or the split directory itself."""
    if split not in SPLITS:
        raise ConfigError(f"unknown ALFWorld split {split!r}; choose one of {list(SPLITS)}")
    for candidate in (root / "json_2.1.1" / split, root / split):
        if candidate.is_dir():
            return candidate
    if root.name == split:
        return root
    raise DataNotFoundError(
        f"no split {split!r} under {str(root)!r} (looked for json_2.1.1/{split} and {split}). {DOWNLOAD_HINT}"
    )


def _solvable(path: Path) -> bool:
    """ALFWorld's ``solvable`` flag, read from the end of the file (it is the last key) without parsing it all."""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 200))
        tail = f.read().decode("utf-8", "replace")
    return '"solvable": false' not in tail and '"solvable":false' not in tail


def task_type_from_dir(name: str) -> str:
    """``pick_heat_then_place_in_recep-Mug-None-Cabinet-10`` -> ``pick_heat_then_place_in_recep``."""
    return name.split("-", 1)[0]


def task_type_of_game(game: CompiledGame) -> str | None:
    """A loose game file's task type: its ``task_type`` key (generated games), else its task directory's name."""
    found = game.data.get("task_type") or task_type_from_dir(Path(game.path).parent.parent.name)
    return found if found in TASK_TYPES else None


@functools.lru_cache(maxsize=16)
def list_games(directory: str, task_types: tuple[str, ...]) -> ListSource:
    """The solvable games of one split, as ALFWorld collects them (no movable-receptacle or sliced tasks)."""
    base = Path(directory)
    tasks = []
    for root, dirs, files in os.walk(base):
        dirs.sort()
        if GAME_FILE not in files or "movable" in root or "Sliced" in root:
            continue
        trial = Path(root)
        rel = trial.relative_to(base)
        task_type = task_type_from_dir(rel.parts[0] if len(rel.parts) > 1 else trial.parent.name)
        if task_type not in task_types or not _solvable(trial / GAME_FILE):
            continue
        tasks.append(
            Task(
                f"{base.name}/{rel.as_posix()}", "", None, {"game_file": str(trial / GAME_FILE), "task_type": task_type}
            )
        )
    if not tasks:
        raise DataNotFoundError(
            f"no solvable {GAME_FILE} files of types {list(task_types)} under {directory!r}. {DOWNLOAD_HINT}"
        )
    return ListSource(tasks)


class GeneratedGames(GeneratedSource):
    """Games made by :mod:`agentgym_r1.envs.alfworld.generator`: unlimited, or the first ``num_games``."""

    def __init__(
        self,
        seed: int,
        task_types: tuple[str, ...],
        num_games: int | None,
        cache_dir: str | None,
        knobs: Knobs = LEVELS["easy"],
    ) -> None:
        if num_games is not None and (not isinstance(num_games, int) or num_games < 1):
            raise ConfigError(f"num_games must be a positive int or None (unlimited), got {num_games!r}")
        self.seed, self.task_types, self.cache_dir, self.knobs = seed, task_types, cache_dir, knobs
        self.size = num_games
        super().__init__(self._make, f"generated-{seed}")

    def _make(self, index: int) -> Task:
        if index < 0 or (self.size is not None and index >= self.size):
            raise ConfigError(f"generated game index must be in [0, {len(self)}), got {index}")
        path = generate(self.seed, index, self.task_types, self.cache_dir, self.knobs)
        return Task(
            f"{self.prefix}-{index}",
            "",
            None,
            {"game_file": str(path), "task_type": task_type_of(index, self.task_types)},
        )


def difficulty_of(source: str, difficulty: object) -> tuple[str, Knobs]:
    """The level's label and knobs; a level other than ``easy`` is refused on a data directory."""
    label, knobs = resolve('ALFWorld source="generated"', LEVELS, difficulty)
    if source not in ("generated", "synthetic") and label != "easy":
        raise ConfigError(
            f"difficulty is for source='generated'; the games of {source!r} are as they are "
            f"(got difficulty={difficulty!r})"
        )
    return label, knobs


def load_source(
    source: str,
    split: str,
    task_types: object,
    seed: int,
    num_games: int | None,
    cache_dir: str | None,
    knobs: Knobs = LEVELS["easy"],
) -> TaskSource:
    """``"generated"`` (alias ``"synthetic"``), ``"alfworld"`` (``$ALFWORLD_DATA``) or a directory in the official
    layout."""
    types = normalise_task_types(task_types)
    if source in ("generated", "synthetic"):
        return GeneratedGames(int(seed), types, num_games, cache_dir, knobs)
    if num_games is not None:
        raise ConfigError("num_games is for source='generated'; a data directory plays all the games of its split")
    return list_games(str(split_dir(data_root(source), split).resolve()), types)
