"""What a rollout returns: one :class:`Episode` per env played, and the training rows built from it.

An episode keeps every turn as the sampler produced it (the exact token ids, their log-probabilities, why generation
stopped) and the token ids of the environment text that followed (rendered by the chat template, tokenized once).
From there, two layouts of training rows (:class:`Sample`):

* **concatenated**: one row per episode. ``prompt_ids`` is the first prompt; ``completion_ids`` is every turn's
  sampled ids and the environment tokens between them, in order; ``env_mask`` is 1 on sampled ids (the end-of-turn
  token the model emitted included) and 0 on environment and chat-template tokens.
* **step**: one row per turn. ``prompt_ids`` is the context the model was given for that turn (the full history, the
  last k turns or a summary); ``completion_ids`` is what it sampled. Rows of one episode share ``episode_id`` so a
  trainer can give them the episode's advantage (Agent-R1's step-level MDP).

Per-step rewards sit on the token that ends their step: ``step_ends[i]`` is the index in ``completion_ids`` of the
last sampled token of step ``i`` and ``step_rewards[i]`` its reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["eos", "stop", "length", "context"]
"""Why generation of one turn stopped: an end-of-turn token, a stop string (``</tool_call>``...), the per-turn token
budget (``max_new_tokens``), or the context limit."""

EndReason = Literal["terminated", "turn_limit", "max_turns", "context_limit", "env_error", "generation_error"]
"""Why an episode ended. Only ``terminated`` is an end by the task; every other reason is a truncation."""

Layout = Literal["concatenated", "step"]

REWARD_PARTS = ("outcome", "process", "format")


def _zero_parts() -> dict[str, float]:
    return dict.fromkeys(REWARD_PARTS, 0.0)


@dataclass(slots=True)
class TurnRecord:
    """One agent turn: what the model was given, what it sampled, and what the env answered.

    ``context_ids`` is the token context the model generated from. With the full-history context it is ``None``: the
    context is then the episode's token sequence up to this turn (``context_len`` tokens), never copied.
    """

    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    action: str
    context_len: int
    context_ids: list[int] | None = None
    env_ids: list[int] = field(default_factory=list)
    reward: float = 0.0
    reward_parts: dict[str, float] = field(default_factory=_zero_parts)
    valid: bool = True
    error: str | None = None
    trainable: bool = True
    """``False`` for a placeholder turn (an episode that could not start): its tokens get mask 0."""


@dataclass(slots=True)
class Sample:
    """One training row. Lists, not tensors: :class:`RolloutBatch` pads them."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    step_ends: list[int]
    step_rewards: list[float]
    reward: float
    reward_parts: dict[str, float]
    success: bool
    episode_id: str
    group: int
    turn: int | None = None
    end_reason: EndReason = "terminated"
    step_process: list[float] = field(default_factory=list)
    """Each step's ``process`` reward part (already inside ``step_rewards``), for trainers that credit it per step."""
    failed: bool = False
    """The episode could not be played (a placeholder, an env that raised, a generation error): a trainer leaves the
    row out of group statistics and the loss, and counts it."""
    policy_version: int = 0
    """The policy that sampled the row, as its number of optimizer updates (:meth:`RolloutBatch.stamp`; asynchronous
    rollouts, :mod:`agentgym_r1.trainers.async_rollouts`, train on rows of earlier versions)."""

    @property
    def truncated(self) -> bool:
        return self.end_reason != "terminated"


@dataclass(slots=True)
class Episode:
    """One episode played by the rollout engine, in tokens.

    ``group`` is the index of the prompt (task) the episode was sampled for and ``sample`` its index among the
    samples of that prompt; GRPO-style estimators normalise rewards within a group. ``end_reason`` says why the
    episode ended (:data:`EndReason`) and ``error`` carries the message when an env raised or generation failed.
    """

    episode_id: str
    group: int
    sample: int
    env_id: str
    prompt_ids: list[int]
    turns: list[TurnRecord] = field(default_factory=list)
    end_reason: EndReason = "terminated"
    error: str | None = None
    success: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    task_id: str | None = None
    seed: int | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    placeholder: bool = False
    text_only: bool = False
    """Played through a chat backend (an OpenAI-compatible endpoint): actions as text, no token ids, no rows."""
    policy_version: int = 0
    """The policy that sampled the episode, as its number of optimizer updates (its rows carry it too)."""

    @property
    def truncated(self) -> bool:
        return self.end_reason != "terminated"

    @property
    def failed(self) -> bool:
        """Not a played episode: a placeholder, or ended by an env that raised or a generation error."""
        return self.placeholder or self.end_reason in ("env_error", "generation_error")

    @property
    def reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def reward_parts(self) -> dict[str, float]:
        parts = _zero_parts()
        for t in self.turns:
            for k, v in t.reward_parts.items():
                parts[k] = parts.get(k, 0.0) + v
        return parts

    @property
    def num_agent_tokens(self) -> int:
        return sum(len(t.completion_ids) for t in self.turns)

    def token_ids(self) -> list[int]:
        """The whole sequence: prompt, then each turn's sampled ids and the env tokens after it."""
        ids = list(self.prompt_ids)
        for t in self.turns:
            ids += t.completion_ids
            ids += t.env_ids
        return ids

    def turn_context(self, index: int) -> list[int]:
        """The token context the model generated turn ``index`` from."""
        turn = self.turns[index]
        if turn.context_ids is not None:
            return list(turn.context_ids)
        return self.token_ids()[: turn.context_len]

    def concatenated(self) -> Sample:
        """One row: env tokens between turns masked out; trailing env tokens after the last turn dropped."""
        if any(t.context_ids is not None for t in self.turns):
            from agentgym_r1.error import ConfigError

            raise ConfigError(
                "the concatenated layout needs episodes played with the full-history context "
                "(context='full'); use layout='step' with 'last_k' or a summariser"
            )
        completion: list[int] = []
        logprobs: list[float] = []
        mask: list[int] = []
        ends: list[int] = []
        for i, t in enumerate(self.turns):
            completion += t.completion_ids
            logprobs += t.logprobs
            mask += [int(t.trainable)] * len(t.completion_ids)
            ends.append(len(completion) - 1)
            if i + 1 < len(self.turns):
                completion += t.env_ids
                logprobs += [0.0] * len(t.env_ids)
                mask += [0] * len(t.env_ids)
        return Sample(
            list(self.prompt_ids),
            completion,
            logprobs,
            mask,
            ends,
            [t.reward for t in self.turns],
            self.reward,
            self.reward_parts,
            self.success,
            self.episode_id,
            self.group,
            None,
            self.end_reason,
            self._step_process(),
            self.failed,
            self.policy_version,
        )

    def _step_process(self) -> list[float]:
        return [float(t.reward_parts.get("process", 0.0)) for t in self.turns]

    def steps(self) -> list[Sample]:
        """One row per turn; each carries its own step reward and the episode's total ``reward``."""
        rows, process = [], self._step_process()
        for i, t in enumerate(self.turns):
            n = len(t.completion_ids)
            rows.append(
                Sample(
                    self.turn_context(i),
                    list(t.completion_ids),
                    list(t.logprobs),
                    [int(t.trainable)] * n,
                    [n - 1],
                    [t.reward],
                    self.reward,
                    self.reward_parts,
                    self.success,
                    self.episode_id,
                    self.group,
                    i,
                    self.end_reason,
                    [process[i]],
                    self.failed,
                    self.policy_version,
                )
            )
        return rows

    def rows(self, layout: Layout) -> list[Sample]:
        if self.text_only:
            return []
        return [self.concatenated()] if layout == "concatenated" else self.steps()


@dataclass(slots=True)
class RolloutBatch:
    """The episodes of one rollout and their training rows in the chosen layout."""

    episodes: list[Episode]
    layout: Layout = "concatenated"
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent in ``generate``, ``env`` (reset and step), ``tokenize`` (templates) and ``total``."""
    samples: list[Sample] = field(init=False)

    def __post_init__(self) -> None:
        self.samples = [row for ep in self.episodes for row in ep.rows(self.layout)]

    def __len__(self) -> int:
        return len(self.samples)

    def stamp(self, version: int) -> RolloutBatch:
        """Mark every episode and row as sampled by the policy after ``version`` optimizer updates; returns the
        batch."""
        for item in (*self.episodes, *self.samples):
            item.policy_version = version
        return self

    def episode_rows(self) -> list[list[Sample]]:
        """:func:`episode_rows` of the batch's rows."""
        return episode_rows(self.samples)

    def to_trl(self, columns: Sequence[str] | None = None) -> dict[str, Any]:
        """The rows as columns: ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (what a TRL
        ``rollout_func`` returns; TRL uses ``env_mask`` as its tool mask) and per-row extras (``env_reward``,
        ``failed``, the step ends and rewards, ...); ``columns`` picks some of them.

        With the concatenated layout the rows are prompt-major, one per episode (the samples of prompt ``i`` are rows
        ``i*G .. i*G+G-1``), as TRL's ``rollout_func`` contract wants. The step layout has one row per turn, a
        number TRL's ``GRPOTrainer`` does not expect; a trainer that uses it groups rows by ``episode_id``."""
        s = self.samples
        every = {
            "prompt_ids": [r.prompt_ids for r in s],
            "completion_ids": [r.completion_ids for r in s],
            "logprobs": [r.logprobs for r in s],
            "env_mask": [r.env_mask for r in s],
            "env_reward": [r.reward for r in s],
            "step_ends": [r.step_ends for r in s],
            "step_rewards": [r.step_rewards for r in s],
            "success": [r.success for r in s],
            "episode_id": [r.episode_id for r in s],
            "group": [r.group for r in s],
            "end_reason": [r.end_reason for r in s],
            "step_process": [r.step_process for r in s],
            "failed": [r.failed for r in s],
            "policy_version": [r.policy_version for r in s],
        }
        unknown = sorted(set(columns or ()) - set(every))
        if unknown:
            raise ValueError(f"unknown columns {unknown}; RolloutBatch.to_trl has {list(every)}")
        return every if columns is None else {name: every[name] for name in columns}

    def to_tensors(self, pad_token_id: int, device: Any = None) -> dict[str, Any]:
        """:func:`row_tensors` of the batch's rows."""
        return row_tensors(self.samples, pad_token_id, device)

    def metric_sums(self) -> dict[str, float]:
        """What the rollout metrics are made of, as sums (a trainer adds them over processes before dividing;
        :func:`rollout_metrics`): every episode, the played ones (not failed), and over the played ones success,
        reward, turns, invalid actions, truncations, agent tokens and episodes ended by the completion budget."""
        played = [e for e in self.episodes if not e.failed]
        return {
            "episodes": len(self.episodes),
            "played": len(played),
            "success": sum(e.success for e in played),
            "reward": sum(e.reward for e in played),
            "turns": sum(len(e.turns) for e in played),
            "invalid": sum(not t.valid for e in played for t in e.turns),
            "truncated": sum(e.truncated for e in played),
            "agent_tokens": sum(e.num_agent_tokens for e in played),
            "clipped": sum(e.end_reason == "context_limit" for e in played),
        }

    def metrics(self, env_id: str | None = None) -> dict[str, float]:
        """This batch's :func:`rollout_metrics`."""
        return rollout_metrics(self.metric_sums(), env_id)


def episode_rows(rows: Sequence[Sample]) -> list[list[Sample]]:
    """The rows of each episode, episodes in order of their first row (one row each in the concatenated layout, one
    per turn in the step layout): what group statistics run over."""
    by_episode: dict[str, list[Sample]] = {}
    for row in rows:
        by_episode.setdefault(row.episode_id, []).append(row)
    return list(by_episode.values())


def rollout_metrics(sums: dict[str, float], env_id: str | None = None) -> dict[str, float]:
    """The rollout metrics from :meth:`RolloutBatch.metric_sums` (one batch's, or added over processes): success,
    reward, turns, truncation and agent tokens per played episode, invalid actions per turn, the failed rows, and
    ``completions/clipped_ratio``: the share of episodes that reached the completion budget (TRL's own counts every
    row not ending in EOS, and turns end on ``</answer>``). Success is ``env/<env_id>/success`` given an env id."""
    n = max(sums["played"], 1)
    return {
        f"env/{env_id}/success" if env_id else "rollout/success": sums["success"] / n,
        "rollout/turns": sums["turns"] / n,
        "rollout/invalid_rate": sums["invalid"] / max(sums["turns"], 1),
        "rollout/reward": sums["reward"] / n,
        "rollout/truncated": sums["truncated"] / n,
        "rollout/agent_tokens": sums["agent_tokens"] / n,
        "rollout/failed_rows": sums["episodes"] - sums["played"],
        "completions/clipped_ratio": sums["clipped"] / max(sums["episodes"], 1),
    }


def pad_rows(
    rows: Sequence[Sequence[Any]],
    value: Any,
    left: bool = False,
    width: int | None = None,
) -> list[list[Any]]:
    """``rows`` padded with ``value`` to ``width`` (default: the longest), on the left or the right: the one padding
    helper of the rows' path (training tensors here, ``generate`` inputs in the transformers backend)."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    if left:
        return [[value] * (width - len(r)) + list(r) for r in rows]
    return [list(r) + [value] * (width - len(r)) for r in rows]


def row_tensors(rows: Sequence[Sample], pad_token_id: int, device: Any = None) -> dict[str, Any]:
    """Padded torch tensors of ``rows``: prompts left-padded, completions right-padded (with their masks),
    ``env_mask``, ``logprobs``; ``step_rewards`` as a dense ``(rows, completion_len)`` tensor with each step's reward
    on its last token; ``rewards`` and ``group`` one per row."""
    import torch

    s = rows
    out = {
        "prompt_ids": pad_rows([r.prompt_ids for r in s], pad_token_id, left=True),
        "prompt_mask": pad_rows([[1] * len(r.prompt_ids) for r in s], 0, left=True),
        "completion_ids": pad_rows([r.completion_ids for r in s], pad_token_id),
        "completion_mask": pad_rows([[1] * len(r.completion_ids) for r in s], 0),
    }
    c_len = max((len(r.completion_ids) for r in s), default=0)
    out["env_mask"] = pad_rows([r.env_mask for r in s], 0, width=c_len)
    tensors = {k: torch.tensor(v, dtype=torch.long, device=device) for k, v in out.items()}
    tensors["logprobs"] = torch.tensor(
        pad_rows([r.logprobs for r in s], 0.0, width=c_len), dtype=torch.float32, device=device
    )
    dense = torch.zeros((len(s), c_len), dtype=torch.float32, device=device)
    for i, r in enumerate(s):
        for end, rew in zip(r.step_ends, r.step_rewards, strict=True):
            dense[i, end] += rew
    tensors["step_rewards"] = dense
    tensors["rewards"] = torch.tensor([r.reward for r in s], dtype=torch.float32, device=device)
    tensors["group"] = torch.tensor([r.group for r in s], dtype=torch.long, device=device)
    return tensors
