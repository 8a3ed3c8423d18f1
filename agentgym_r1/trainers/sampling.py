"""Which tasks a GRPO step trains on: dynamic sampling (DAPO) and a pass-rate curriculum over difficulty levels.

:class:`TaskSampling` sits between TRL's prompts and the rollout engine (``AgentGRPOTrainer._play``). With both
off, or outside training, it plays the resets TRL gave, once, unchanged: the rows are today's. Otherwise, a step:

* **curriculum** (``curriculum: pass_rate``): each group's difficulty level is drawn by :class:`PassRateCurriculum`
  from the recent group pass rates of the levels, favouring those inside ``curriculum_band`` (where a group's samples
  disagree most, so its advantages are largest); the level reaches the env as ``env_kwargs.difficulty`` of that
  group's reset (:meth:`agentgym_r1.trainers.common.Rollouts.prompts`).
* **dynamic sampling** (``dynamic_sampling: true``): groups whose rewards are all the same (no advantage, no
  gradient), or with ``dynamic_sampling_filter: success`` groups whose samples all succeed or all fail (DAPO's
  filter, which a shaped reward's penalties cannot pass), are set aside and new tasks, drawn from the training
  dataset, are played in their place, up to ``dynamic_sampling_max_tries`` rollouts a step. A batch still short
  then is filled with the set-aside groups played last, so the step trains on what was collected (those rows carry
  no advantage, or with ``success`` only their penalties' differences), and a warning and
  ``sampling/unfilled_groups`` say so: the loop is bounded, never endless.

Why not TRL's: TRL 1.16 has no dynamic sampling (read: ``trl/trainer/grpo_trainer.py`` only counts the groups of
zero reward std, ``frac_reward_zero_std``, and its ``dapo`` loss type is DAPO's token-level normalisation, not its
sampling; ``trl/experimental`` has none either) and no curriculum. The refill must happen inside ``rollout_func``
anyway: TRL hands it a fixed number of prompts and expects as many rows back.

The state (the draw generator, the levels' recent pass rates, the episodes generated) is saved beside every
checkpoint as ``sampling_state.json`` by :class:`SamplingStateCallback` and read back by :meth:`TaskSampling.resume`,
so a resumed run draws what the uninterrupted one would have.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from agentgym_r1.adapters.records import Episode, RolloutBatch
from agentgym_r1.trainers.sampling_config import level_label

logger = logging.getLogger(__name__)

STATE_FILE = "sampling_state.json"
SPREAD = 1e-6  # rewards closer than this count as equal (the group's advantages would be ~0)
Play = Callable[[Sequence[dict[str, Any]]], RolloutBatch]


class PassRateCurriculum:
    """Difficulty levels drawn by their recent group pass rate: weight 1 for a level whose mean pass rate over its
    last ``window`` groups is inside ``band`` (or that has no group yet), ``explore`` otherwise; uniform when every
    weight is 0."""

    def __init__(self, levels: Sequence[Any], band: Sequence[float], window: int, explore: float) -> None:
        self.levels = list(levels)
        self.labels = [level_label(x, i) for i, x in enumerate(self.levels)]
        self.band, self.window, self.explore = (float(band[0]), float(band[1])), window, explore
        self.recent: list[deque[float]] = [deque(maxlen=window) for _ in self.levels]

    def pass_rate(self, index: int) -> float | None:
        rates = self.recent[index]
        return sum(rates) / len(rates) if rates else None

    def weights(self) -> np.ndarray:
        low, high = self.band
        w = np.array(
            [
                1.0 if (p := self.pass_rate(i)) is None or low <= p <= high else self.explore
                for i in range(len(self.levels))
            ]
        )
        return w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))

    def draw(self, rng: np.random.Generator, n: int) -> list[int]:
        """``n`` level indices, one per group."""
        return [int(i) for i in rng.choice(len(self.levels), size=n, p=self.weights())]

    def record(self, index: int, pass_rate: float) -> None:
        self.recent[index].append(pass_rate)

    def state(self) -> dict[str, list[float]]:
        return {label: list(rates) for label, rates in zip(self.labels, self.recent, strict=True)}

    def load(self, state: dict[str, list[float]]) -> None:
        for i, label in enumerate(self.labels):
            self.recent[i] = deque((float(x) for x in state.get(label, [])), maxlen=self.window)


class TaskSampling:
    """One trainer's task sampling (see the module docstring). ``dataset`` is the training dataset (rows with a
    ``prompt``, a JSON reset), which refills draw from; ``group`` is ``num_generations``."""

    def __init__(self, args: Any, dataset: Any, group: int) -> None:
        self.args, self.group = args, group
        self.active = bool(args.sampling_active)
        self.dataset = dataset
        self.rng = np.random.default_rng([int(args.seed), 38])
        self.curriculum = (
            PassRateCurriculum(args.levels, args.curriculum_band, args.curriculum_window, args.curriculum_explore)
            if args.curriculum
            else None
        )
        self.generated = 0  # episodes played in training, every try counted
        self.metrics: dict[str, float] = {}
        self.last_levels: list[int] = []  # the levels drawn in the last step (tests, benchmarks)

    # -- one step ------------------------------------------------------------------------------------------------------
    def play(self, play: Play, resets: Sequence[dict[str, Any]], training: bool) -> RolloutBatch:
        """The step's batch: ``play(resets)`` as it is when sampling is off or outside training; else the groups
        chosen as the module docstring says, as many as ``resets`` holds."""
        if not (self.active and training):
            batch = play(resets)
            self.generated += len(batch.episodes) if training else 0
            return batch
        assert len(resets) % self.group == 0, "TRL repeats each prompt num_generations times in a row"
        needed = len(resets) // self.group
        pending = [dict(resets[i * self.group]) for i in range(needed)]
        kept: list[list[Episode]] = []
        spare: list[list[Episode]] = []
        tries, episodes, timings = 0, 0, {}
        self.last_levels = []
        tries_allowed = self.args.dynamic_sampling_max_tries if self.args.dynamic_sampling else 1
        while True:
            tries += 1
            batch = play(self._with_levels(pending))
            episodes += len(batch.episodes)
            timings = {k: timings.get(k, 0.0) + v for k, v in batch.timings.items()}
            for group in self._groups(batch.episodes):
                (kept if self._keeps(group) or not self.args.dynamic_sampling else spare).append(group)
            if len(kept) >= needed or tries >= tries_allowed:
                break
            pending = [self._draw_reset() for _ in range(needed - len(kept))]
        unfilled = max(needed - len(kept), 0)
        chosen = kept[:needed] + spare[len(spare) - unfilled :] if unfilled else kept[:needed]
        self.generated += episodes
        self._log(tries, episodes, needed, len(kept), unfilled)
        return self._batch(chosen, batch.layout, timings)

    def _with_levels(self, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each group's reset (with its drawn level, under a curriculum), repeated once per sample."""
        if self.curriculum is not None:
            drawn = self.curriculum.draw(self.rng, len(groups))
            self.last_levels += drawn
            groups = [
                {**g, "env_kwargs": {**g.get("env_kwargs", {}), "difficulty": self.curriculum.levels[i]}}
                for g, i in zip(groups, drawn, strict=True)
            ]
        return [g for g in groups for _ in range(self.group)]

    def _groups(self, episodes: list[Episode]) -> list[list[Episode]]:
        """The batch's episodes by group (consecutive), each group's pass rate recorded for its level."""
        groups = [episodes[i : i + self.group] for i in range(0, len(episodes), self.group)]
        if self.curriculum is not None:
            for group, level in zip(groups, self.last_levels[-len(groups) :], strict=True):
                played = [e for e in group if not e.failed]
                if played:
                    self.curriculum.record(level, sum(e.success for e in played) / len(played))
        return groups

    def _keeps(self, group: list[Episode]) -> bool:
        """Whether dynamic sampling keeps ``group``: its played samples' rewards differ, or (filter ``success``)
        some of them succeeded and some did not."""
        played = [e for e in group if not e.failed]
        if self.args.dynamic_sampling_filter == "success":
            return len({bool(e.success) for e in played}) > 1
        rewards = [e.reward for e in played]
        return len(rewards) > 1 and max(rewards) - min(rewards) > SPREAD

    def _draw_reset(self) -> dict[str, Any]:
        """A task for a refill, drawn from the training dataset."""
        return json.loads(self.dataset[int(self.rng.integers(len(self.dataset)))]["prompt"])

    def _batch(self, groups: list[list[Episode]], layout: Any, timings: dict[str, float]) -> RolloutBatch:
        episodes = [e for g in groups for e in g]
        for i, group in enumerate(groups):
            for e in group:
                e.group = i  # their index in this batch, as the engine numbers a rollout's groups
        return RolloutBatch(episodes, layout, timings)

    def _log(self, tries: int, episodes: int, needed: int, kept: int, unfilled: int) -> None:
        self.metrics = {"sampling/episodes": float(episodes), "sampling/episodes_total": float(self.generated)}
        if self.args.dynamic_sampling:
            self.metrics |= {
                "sampling/tries": float(tries),
                "sampling/kept_groups": min(kept, needed) / needed,
                "sampling/unfilled_groups": float(unfilled),
            }
            if unfilled:
                by_reward = self.args.dynamic_sampling_filter == "reward"
                equal, missing = ("rewards", "advantage") if by_reward else ("successes", "success signal")
                logger.warning(
                    "dynamic sampling: %d of %d groups still had equal %s after %d rollouts "
                    "(dynamic_sampling_max_tries=%d); training on what was collected, those %d groups with no "
                    "%s. Raise dynamic_sampling_max_tries, or make the tasks easier or harder.",
                    unfilled,
                    needed,
                    equal,
                    tries,
                    self.args.dynamic_sampling_max_tries,
                    unfilled,
                    missing,
                )
        if self.curriculum is not None:
            drawn = self.last_levels
            for i, label in enumerate(self.curriculum.labels):
                self.metrics[f"curriculum/{label}/share"] = drawn.count(i) / max(len(drawn), 1)
                if (p := self.curriculum.pass_rate(i)) is not None:
                    self.metrics[f"curriculum/{label}/pass_rate"] = p

    # -- checkpoints ---------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "rng": self.rng.bit_generator.state,
            "generated": self.generated,
            "curriculum": self.curriculum.state() if self.curriculum is not None else None,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.generated = int(state.get("generated", 0))
        if self.curriculum is not None and state.get("curriculum"):
            self.curriculum.load(state["curriculum"])

    def save(self, directory: str) -> None:
        """``directory/sampling_state.json``, written whole or not at all (a temporary file, then renamed)."""
        path = os.path.join(directory, STATE_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(self.state(), f)
        os.replace(path + ".tmp", path)

    def resume(self, checkpoint: str | bool | None, output_dir: str) -> None:
        """Load the state saved beside ``checkpoint`` (``True``: the last one in ``output_dir``, as transformers'
        ``Trainer.train`` resolves it). A checkpoint without one (saved with sampling off) starts afresh, said in
        the log."""
        if not self.active or checkpoint is None or checkpoint is False:
            return
        if checkpoint is True:
            checkpoint = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
            if checkpoint is None:
                return  # transformers raises its own error for this
        path = os.path.join(str(checkpoint), STATE_FILE)
        if not os.path.isfile(path):
            logger.warning("%s has no %s: task sampling starts afresh", checkpoint, STATE_FILE)
            return
        with open(path, encoding="utf-8") as f:
            self.load(json.load(f))


class SamplingStateCallback(TrainerCallback):
    """Saves :class:`TaskSampling`'s state into each checkpoint the trainer writes (``output_dir/checkpoint-N``,
    transformers' ``PREFIX_CHECKPOINT_DIR``; ``on_save`` runs right after the checkpoint is written)."""

    def __init__(self, sampling: TaskSampling) -> None:
        self.sampling = sampling

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        directory = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if self.sampling.active and state.is_world_process_zero and os.path.isdir(directory):
            self.sampling.save(directory)
