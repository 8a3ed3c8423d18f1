"""The GRPO config's task-sampling fields (:class:`SamplingArguments`): dynamic sampling and the pass-rate curriculum
of :mod:`agentgym_r1.trainers.sampling`, and the checks that refuse a configuration they cannot serve.

The fields live in their own mixin so that the GRPO config gains them with one base class; the numbers are checked
with the other fields (:mod:`agentgym_r1.trainers.limits`), the combinations here, the levels against the env in
:func:`check_levels` (``preflight`` and the trainer call it before any work).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from agentgym_r1.error import ConfigError

CURRICULA = (None, "pass_rate")
FILTERS = frozenset({"reward", "success"})  # dynamic_sampling_filter: what must differ inside a kept group
DEFAULT_LEVELS = ("easy", "medium", "hard")


@dataclass
class SamplingArguments:
    r"""
    Which tasks a GRPO step trains on.

    Parameters:
        > Parameters that control dynamic sampling (DAPO)

        dynamic_sampling (`bool`, *optional*, defaults to `False`):
            Keep only groups whose rewards differ (a group whose samples all scored the same trains nothing) and
            play more tasks until the batch is full again, in at most `dynamic_sampling_max_tries` rollouts a step.
            A batch still short after them is filled with the groups played last and the step trains on it; the log
            says so (`sampling/unfilled_groups`).
        dynamic_sampling_max_tries (`int`, *optional*, defaults to `4`):
            Rollouts a step may play, the first included (at least 2 with dynamic sampling: one to refill).
        dynamic_sampling_filter (`str`, *optional*, defaults to `"reward"`):
            What must differ inside a group for it to be kept: `"reward"` (its samples' rewards, penalties
            included) or `"success"` (DAPO's filter: some samples solve the task and some do not). With shaped
            rewards (format or invalid-action penalties) `"reward"` keeps groups that differ only by a penalty.

        > Parameters that control the curriculum

        curriculum (`str`, *optional*):
            `"pass_rate"`: each group's difficulty level is drawn from `curriculum_levels`, favouring levels whose
            recent group pass rate is inside `curriculum_band`. Needs a source with levels (a generated one). Its
            state is saved in every checkpoint (`sampling_state.json`), so a resumed run samples the same way.
        curriculum_levels (`list`, *optional*):
            The levels to choose from: level names (`easy`, `medium`, `hard`, the default) or dicts of the
            generator's knobs (JSON object strings on the command line).
        curriculum_band (`list[float]`, *optional*, defaults to `[0.2, 0.8]`):
            The pass rates, low and high in [0, 1], of the levels a model learns most from.
        curriculum_window (`int`, *optional*, defaults to `8`):
            Recent groups per level whose pass rates make its rate.
        curriculum_explore (`float`, *optional*, defaults to `0.1`):
            The weight of a level outside the band, against 1 for a level inside it (or not tried yet).
    """

    dynamic_sampling: bool = field(
        default=False,
        metadata={"help": "keep groups whose rewards differ and refill the batch with new tasks (DAPO)"},
    )
    dynamic_sampling_max_tries: int = field(
        default=4, metadata={"help": "rollouts a step may play with dynamic sampling, the first included"}
    )
    dynamic_sampling_filter: str = field(
        default="reward",
        metadata={"help": "what must differ in a group to keep it: 'reward' or 'success' (DAPO's accuracy filter)"},
    )
    curriculum: str | None = field(
        default=None, metadata={"help": "'pass_rate': draw difficulty levels by their recent group pass rate"}
    )
    curriculum_levels: list[str] | None = field(
        default=None,
        metadata={"help": "levels to draw from: names (easy, medium, hard: the default) or knob dicts (JSON)"},
    )
    curriculum_band: list[float] = field(
        default_factory=lambda: [0.2, 0.8], metadata={"help": "pass rates [low, high] a level is favoured in"}
    )
    curriculum_window: int = field(default=8, metadata={"help": "recent groups per level in its pass rate"})
    curriculum_explore: float = field(
        default=0.1, metadata={"help": "weight of a level outside the band (1 inside it or untried)"}
    )

    @property
    def sampling_active(self) -> bool:
        """Whether task sampling departs from TRL's (the dataset's tasks, as given)."""
        return bool(self.dynamic_sampling or self.curriculum)

    @property
    def levels(self) -> list[Any]:
        """The curriculum's levels, parsed (a name, or a dict of knobs)."""
        return [_level(x) for x in (self.curriculum_levels or DEFAULT_LEVELS)]

    def _check_sampling(self) -> None:
        """The combinations of the sampling fields (their numbers were checked with the others). Runs after TRL's
        ``__post_init__``, which resolves ``world_size``."""
        if self.dynamic_sampling and self.dynamic_sampling_max_tries < 2:
            raise ConfigError(
                f"dynamic_sampling_max_tries={self.dynamic_sampling_max_tries} with dynamic_sampling=true: the first "
                "rollout is the step's own, so no try would be left to refill the groups whose rewards are all the "
                "same. Give dynamic_sampling_max_tries >= 2 (e.g. 4), or set dynamic_sampling: false."
            )
        if self.dynamic_sampling and getattr(self, "top_k", 0) == 1:
            raise ConfigError(
                "dynamic_sampling=true with top_k=1: every sample of a task is the same greedy text, so no group's "
                "rewards can ever differ and no batch could be filled. Sample (top_k: 0, temperature > 0) or set "
                "dynamic_sampling: false."
            )
        if self.dynamic_sampling_filter not in FILTERS:
            raise ConfigError(
                f"dynamic_sampling_filter={self.dynamic_sampling_filter!r} is not one of {sorted(FILTERS)}. Use "
                "'reward' (a group is kept when its rewards differ) or 'success' (when some samples succeed and some "
                "do not)."
            )
        if self.curriculum not in CURRICULA:
            raise ConfigError(f"curriculum={self.curriculum!r} is not one of 'pass_rate' or null. Use one of them.")
        self._check_band()
        if self.curriculum and len({json.dumps(x, sort_keys=True) for x in self.levels}) < 2:
            raise ConfigError(
                f"curriculum_levels={self.curriculum_levels!r}: the curriculum chooses among levels, so it needs at "
                "least two different ones (e.g. [easy, medium, hard]). With one level, set env_kwargs.difficulty "
                "to it and leave curriculum unset."
            )
        if self.curriculum and "difficulty" in (self.env_kwargs or {}):  # type: ignore[attr-defined]
            raise ConfigError(
                f"curriculum={self.curriculum!r} with env_kwargs.difficulty="
                f"{self.env_kwargs['difficulty']!r}: the curriculum picks each task's level. "  # type: ignore[attr-defined]
                "Remove difficulty from env_kwargs and list the levels in curriculum_levels."
            )
        processes = getattr(self, "world_size", 1)
        if self.sampling_active and processes > 1:
            raise ConfigError(
                f"dynamic_sampling={self.dynamic_sampling}, curriculum={self.curriculum!r} on {processes} processes: "
                "the samples of a task may be split across processes, and each process would draw its own refills "
                "and levels, so a group would play different tasks. Train on one process, or turn both off."
            )

    def _check_band(self) -> None:
        band = self.curriculum_band
        ok = (
            isinstance(band, list | tuple)
            and len(band) == 2
            and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in band)
            and 0.0 <= band[0] <= band[1] <= 1.0
        )
        if not ok:
            raise ConfigError(
                f"curriculum_band={band!r}: give two pass rates [low, high] with 0 <= low <= high <= 1, e.g. "
                "[0.2, 0.8] (a level whose recent pass rate is inside is favoured)."
            )


def _level(value: Any) -> Any:
    """A level as given: a name, a dict of knobs, or (the command line) a JSON object string."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"curriculum_levels: {value!r} is not a JSON object ({e.msg}). Give a level name or a dict of knobs."
            ) from e
    if isinstance(value, dict) or (isinstance(value, str) and value):
        return value
    raise ConfigError(
        f"curriculum_levels: {value!r} is not a level. Give level names (easy, medium, hard) or dicts of the "
        "generator's knobs."
    )


def level_label(level: Any, index: int) -> str:
    """A level's name in metrics and in the saved state: its name, or ``level<i>`` for a dict of knobs."""
    return level if isinstance(level, str) else f"level{index}"


def check_levels(args: Any) -> None:
    """With a curriculum, every level makes the env and resets it (:func:`~agentgym_r1.trainers.common.
    check_env_builds`): a source without levels (real data, an env without ``difficulty``) or a level the
    generator does not know fails here, at start, with the fix."""
    if not getattr(args, "curriculum", None):
        return
    from agentgym_r1.trainers.common import check_env_builds

    for level in args.levels:
        try:
            check_env_builds(args.env_id, {**args.env_kwargs, "difficulty": level})
        except ConfigError as e:
            raise ConfigError(
                f"curriculum={args.curriculum!r} draws difficulty levels, but {args.env_id} with env_kwargs="
                f"{args.env_kwargs!r} refused difficulty={level!r} ({e}). Use a source with levels (a generated "
                "one, e.g. source: synthetic), levels its generator knows, or leave curriculum unset."
            ) from e
