"""The rows' record types: padding, the rows of each episode, the columns handed to a trainer."""

from __future__ import annotations

import pytest

from agentgym_r1.adapters.records import Episode, RolloutBatch, TurnRecord, pad_rows


def _episode(name: str, group: int) -> Episode:
    turns = [
        TurnRecord([11, 12], [-0.1, -0.2], "eos", "a", 2, env_ids=[90], reward=0.5),
        TurnRecord([13], [-0.3], "eos", "b", 5, reward=1.0),
    ]
    return Episode(name, group, 0, "x", [1, 2], turns)


def test_pad_rows_pads_either_side_to_the_longest_or_a_width() -> None:
    assert pad_rows([[1], [2, 3]], 0) == [[1, 0], [2, 3]]
    assert pad_rows([[1], [2, 3]], 9, left=True) == [[9, 1], [2, 3]]
    assert pad_rows([[1]], 0, left=True, width=3) == [[0, 0, 1]]
    assert pad_rows([], 0) == []


def test_episode_rows_group_step_rows_by_episode_in_order() -> None:
    batch = RolloutBatch([_episode("a", 0), _episode("b", 1)], layout="step")
    groups = batch.episode_rows()
    assert [[r.episode_id for r in rows] for rows in groups] == [["a", "a"], ["b", "b"]]
    assert [[r.turn for r in rows] for rows in groups] == [[0, 1], [0, 1]]
    assert [len(rows) for rows in RolloutBatch([_episode("a", 0)]).episode_rows()] == [1]


def test_to_trl_picks_columns_and_names_unknown_ones() -> None:
    batch = RolloutBatch([_episode("a", 0)])
    assert batch.to_trl(["env_mask", "env_reward"]) == {"env_mask": [[1, 1, 0, 1]], "env_reward": [1.5]}
    assert len(batch.to_trl()) == 14
    assert batch.stamp(3).to_trl(["policy_version"]) == {"policy_version": [3]}
    with pytest.raises(ValueError, match="tool_mask"):
        batch.to_trl(["tool_mask"])


def test_row_tensors_pad_prompts_left_and_completions_right() -> None:
    pytest.importorskip("torch")
    rows = RolloutBatch([_episode("a", 0)], layout="step").samples
    t = RolloutBatch([_episode("a", 0)], layout="step").to_tensors(pad_token_id=0)
    assert t["prompt_ids"].tolist() == [[0, 0, 0, 1, 2], rows[1].prompt_ids]
    assert t["completion_ids"].tolist() == [[11, 12], [13, 0]] and t["env_mask"].tolist() == [[1, 1], [1, 0]]
    assert t["step_rewards"].tolist() == [[0.0, 0.5], [1.0, 0.0]]


def test_metrics_follow_the_trainers_rules_failed_episodes_counted_apart() -> None:
    """Issue 39: RolloutBatch.metrics and the trainers' gathered metrics had different rules (an env error was a
    played episode here, a failed row there). One set now: averages over played episodes, failures counted."""
    failed = _episode("f", 1)
    failed.end_reason, failed.error = "env_error", "boom"
    played = _episode("a", 0)
    played.success = True
    metrics = RolloutBatch([played, failed]).metrics()
    assert metrics["rollout/failed_rows"] == 1
    assert metrics["rollout/success"] == 1.0 and metrics["rollout/turns"] == 2.0 and metrics["rollout/reward"] == 1.5
    assert metrics["rollout/agent_tokens"] == 3.0 and metrics["rollout/truncated"] == 0.0
    assert metrics["completions/clipped_ratio"] == 0.0
    assert RolloutBatch([played]).metrics("E-v0")["env/E-v0/success"] == 1.0
