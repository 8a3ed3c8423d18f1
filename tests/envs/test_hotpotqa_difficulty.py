"""Difficulty levels of HotpotQA's synthetic source: pinned texts, answers in the supporting passages, errors."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_r1  # noqa: F401
from agentgym_r1.envs.hotpotqa.synthetic import LEVELS, build_kb, generate_question
from agentgym_r1.error import ConfigError

PINNED = {
    ("easy", 0): ('In which city was the artist of the album "The Crimson Shourikum" born?', "Lairmere"),
    ("medium", 0): (
        'On which river lies the birthplace of the director of the film "The Glass Theiveifound"?',
        "Shoshirk",
    ),
    ("hard", 2): (
        "Which has more inhabitants, the city where Caleinesk Museum has its headquarters or the city where "
        "Louveli Museum has its headquarters?",
        "Kragerford",
    ),
}


@pytest.mark.parametrize(("level", "index"), list(PINNED))
def test_the_same_seed_and_level_give_the_same_question(level, index):
    q = generate_question(0, index, 1000, LEVELS[level])
    assert (q.question, q.answer) == PINNED[(level, index)]


def test_easy_is_the_default_and_unchanged():
    assert generate_question(0, 7) == generate_question(0, 7, 1000, LEVELS["easy"])
    env = gym.make("AgentR1/HotpotQA-v0")
    assert env.reset(seed=0)[1]["env"]["difficulty"] == "easy"


@pytest.mark.parametrize("level", list(LEVELS))
def test_the_answer_is_in_the_last_supporting_passages(level):
    passages = build_kb(0, 1000).passages
    hops = []
    for i in range(200):
        q = generate_question(0, i, 1000, LEVELS[level])
        texts = [passages[t] for t in q.supporting]
        assert q.answer in ("yes", "no") or q.answer in " ".join(texts), q
        hops.append(len(q.supporting))
    assert (max(hops) == 2) == (level == "easy")


def test_harder_levels_need_more_passages():
    def mean_support(level):
        return sum(len(generate_question(1, i, 1000, LEVELS[level]).supporting) for i in range(200)) / 200

    assert mean_support("easy") == 2 < mean_support("medium") < mean_support("hard")


def test_the_level_is_recorded_and_refused_on_real_data(tmp_path):
    env = gym.make("AgentR1/HotpotQA-v0", difficulty={"three_hop": 1.0})
    assert env.reset(seed=0)[1]["env"]["difficulty"] == "custom"
    with pytest.raises(ConfigError, match="difficulty is for source='synthetic'"):
        gym.make("AgentR1/HotpotQA-v0", source=str(tmp_path / "x.json"), difficulty="hard")


@pytest.mark.parametrize(
    ("difficulty", "match"),
    [
        ("impossible", r"unknown difficulty 'impossible'.*\['easy', 'medium', 'hard'\]"),
        ({"hops": 3}, r"unknown difficulty knob\(s\) \['hops'\].*\['three_hop', 'bridged_comparison'\]"),
        ({"three_hop": 2}, r"three_hop must be a number in \[0, 1\]"),
    ],
)
def test_bad_difficulty_is_a_named_error_at_construction(difficulty, match):
    with pytest.raises(ConfigError, match=match):
        gym.make("AgentR1/HotpotQA-v0", difficulty=difficulty)
