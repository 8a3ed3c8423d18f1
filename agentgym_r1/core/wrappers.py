"""Episode rules as wrappers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class EpisodeEnd(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Makes ``terminated`` and ``truncated`` exclusive and says why the episode ended.

    Gymnasium's :class:`~gymnasium.wrappers.TimeLimit` sets ``truncated`` on the last allowed step even when that step
    also terminated the task (the agent answered on its last turn). A trainer must then not bootstrap, and the
    episode did end by the task, so this wrapper, applied outside ``TimeLimit`` by every registered id, clears
    ``truncated`` in that case. ``info["episode_end"]`` is ``"terminated"`` or ``"turn_limit"`` on the last step.
    """

    def __init__(self, env: gym.Env[str, str]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated:
            truncated = False
            info["episode_end"] = "terminated"
        elif truncated:
            info["episode_end"] = "turn_limit"
        return obs, reward, terminated, truncated, info
