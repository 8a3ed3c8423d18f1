"""The paired test of a trained agent's two rows: McNemar's exact p on the discordant episodes, episodes matched by
identity (index and reset seed within runs of the same env, source, options and job seed), never by position; and
the board's text and HTML print it under the rows."""

from __future__ import annotations

import random
from math import comb

import pytest

from agentgym_r1.leaderboard import render
from agentgym_r1.leaderboard.board import board, mcnemar, pair_episodes, pair_outcomes, paired_rows
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta, TrainingRecord

GSM8K = "AgentR1/GSM8K-v0"
BEFORE, AFTER = "hf:/ckpt/sft?max_new_tokens=40", "hf:/ckpt/grpo?max_new_tokens=40"


def episodes(outcomes: list[bool], start: int = 0) -> list[EpisodeRecord]:
    return [
        EpisodeRecord(start + i, start + i, None, ok, float(ok), 1, 0, metrics={"accuracy": float(ok)})
        for i, ok in enumerate(outcomes)
    ]


def test_mcnemar_exact_p_matches_the_binomial_sums_by_hand():
    # 19 newly solved, 3 lost (the case): p = 2 * sum_{k<=3} C(22, k) / 2^22 = 2 * 1794 / 4194304
    assert mcnemar(19, 3) == pytest.approx(2 * (1 + 22 + 231 + 1540) / 2**22, rel=1e-12)
    assert mcnemar(19, 3) == pytest.approx(0.000855, abs=1e-6)
    assert mcnemar(3, 19) == mcnemar(19, 3)  # two-sided
    assert mcnemar(5, 0) == pytest.approx(2 / 2**5)  # all five discordant pairs one way: 0.0625, not significant
    assert mcnemar(24, 9) == pytest.approx(2 * sum(comb(33, k) for k in range(10)) / 2**33, rel=1e-12)
    assert mcnemar(4, 4) == 1.0 and mcnemar(0, 0) == 1.0


def test_paired_outcome_lists_count_each_discordant_episode_once_by_direction():
    before = [1, 1, 0, 0, 1, 0, 0]
    after = [True, False, True, True, True, False, True]
    test = pair_outcomes(before, after)
    assert (test.pairs, test.gained, test.lost) == (7, 3, 1)
    assert test.p == pytest.approx(mcnemar(3, 1))
    swapped = pair_outcomes(after, before)
    assert (swapped.gained, swapped.lost, swapped.p) == (1, 3, test.p)
    with pytest.raises(ValueError, match="same episodes: 7 before, 6 after"):
        pair_outcomes(before, after[:6])


def test_pairs_are_matched_by_episode_identity_not_by_position():
    before = [False] * 6 + [True] * 2  # episodes 0-5 unsolved, 6-7 solved
    after = [True] * 6 + [True, False]  # 0-5 newly solved, 6 kept, 7 lost
    b, a = episodes(before), episodes(after)
    expected = pair_episodes(b, a)
    assert (expected.pairs, expected.gained, expected.lost) == (8, 6, 1)
    assert expected.p == pytest.approx(mcnemar(6, 1))
    # the same runs with their rows in another order (as a store or a resumed job may give them): the same test;
    # pairing by position would count other pairs (gained and lost change for this shuffle)
    shuffled = a[:]
    random.Random(3).shuffle(shuffled)
    by_position = sum(x.success and not y.success for y, x in zip(b, shuffled, strict=True))
    assert by_position != expected.gained  # the shuffle does move pairs: the check below can fail
    assert pair_episodes(b, shuffled) == expected
    assert pair_episodes(list(reversed(b)), shuffled) == expected


def test_an_episode_only_one_run_played_is_left_out():
    b = episodes([False, False, True])  # episodes 0, 1, 2
    a = episodes([True, True, True], start=1)  # episodes 1, 2, 3: position pairing would pair 0 with 1, ...
    got = pair_episodes(b, a)
    assert (got.pairs, got.gained, got.lost) == (2, 1, 0)


def _run(store, policy, outcomes, options='{"seed":1}', start=0, kind="model"):
    meta = RunMeta(GSM8K, "synthetic", policy, 0, len(outcomes), policy_kind=kind, status="done", env_kwargs=options)
    run_id = store.begin_run(meta)
    for ep in episodes(outcomes, start):
        store.add_episode(meta, run_id, ep)
    store.finish_run(meta, "done")
    return run_id


def _trained_store(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.save_training(
        TrainingRecord(
            "k",
            GSM8K,
            "synthetic",
            '{"seed":1}',
            "done",
            None,
            BEFORE,
            AFTER,
            2,
            [[0, 0.25, 8], [2, 0.75, 8]],
            {"sft_steps": 2, "grpo_steps": 2},
        )
    )
    return store


def test_the_board_pairs_the_trained_rows_of_the_same_episodes_and_prints_the_test(tmp_path):
    store = _trained_store(tmp_path)
    _run(store, BEFORE, [False] * 6 + [True] * 2)
    after_id = _run(store, AFTER, [True] * 7 + [False])
    # the same policies on other options: other tasks, paired with each other, never with the rows above
    _run(store, BEFORE, [True] * 8, options='{"seed":2}')
    other_id = _run(store, AFTER, [False] * 8, options='{"seed":2}')
    pairs = paired_rows(store)
    assert sorted(pairs) == sorted([after_id, other_id])
    got = pairs[after_id]
    assert (got.pairs, got.gained, got.lost) == (8, 6, 1)
    assert (pairs[other_id].gained, pairs[other_id].lost) == (0, 8)
    rows = board(store, references=False)[GSM8K]
    (after,) = [r for r in rows if r.options == "seed=1" and r.paired is not None]
    assert after.policy.startswith("tiny agent, after training") and after.paired == got
    assert not any(r.paired for r in rows if "before" in r.policy)
    line = (
        f"'{after.policy}' against its start on the same 8 episodes: 6 newly solved, 1 lost; McNemar's exact "
        f"p = {mcnemar(6, 1):.2g}"
    )
    boards = board(store, references=False)
    assert line in render.terminal(boards) and line in render.markdown(boards)
    page = render.to_html(boards)
    assert "6 newly solved, 1 lost" in page and 'class="note paired"' in page
    store.close()
