"""Difficulty levels of GSM8K's synthetic source: pinned texts, the levels' knobs and the named errors."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_r1  # noqa: F401
from agentgym_r1.envs.gsm8k.calculator import evaluate, format_number
from agentgym_r1.envs.gsm8k.synthetic import LEVELS, generate_problem
from agentgym_r1.error import ConfigError

PINNED = {
    ("easy", 0): (
        "Kira has 48 eggs. She buys 8 bags with 10 eggs in each. She splits the eggs equally into 4 piles "
        "and keeps one pile. How many eggs does Kira have now?",
        "32",
    ),
    ("medium", 0): (
        "Kira has 240 eggs. She buys 8 bags with 15 eggs in each. She buys 5 bags with 6 eggs in each. "
        "She buys 7 bags with 7 eggs in each. How many eggs does Kira have now?",
        "439",
    ),
    ("hard", 0): (
        "Kira has 480 eggs. Coach Rivera buys 14 bags with 26 eggs in each. She buys 8 bags with 15 eggs in "
        "each. She buys 5 bags with 6 eggs in each. She gets 4 dozen more eggs. Grandpa Joe has 608 eggs at "
        "home. She gives 278 eggs to Quinn. How many eggs does Kira have now?",
        "400",
    ),
}


@pytest.mark.parametrize(("level", "index"), list(PINNED))
def test_the_same_seed_and_level_give_the_same_text(level, index):
    p = generate_problem(0, index, knobs=LEVELS[level])
    assert (p.question, p.answer) == PINNED[(level, index)]


def test_easy_is_the_default_and_unchanged():
    env = gym.make("AgentR1/GSM8K-v0")
    obs, info = env.reset(seed=0)
    assert info["env"] == {"difficulty": "easy"}
    assert generate_problem(0, 0) == generate_problem(0, 0, knobs=LEVELS["easy"]) == generate_problem(0, 0, 2, 4)


@pytest.mark.parametrize("level", list(LEVELS))
def test_every_level_is_solvable_by_its_expert_trace(level):
    for i in range(200):
        p = generate_problem(5, i, knobs=LEVELS[level])
        assert LEVELS[level].min_steps <= len(p.expressions) <= LEVELS[level].max_steps
        values = [format_number(evaluate(e)) for e in p.expressions]
        assert values[-1] == p.answer


def test_harder_levels_have_more_steps_distractors_and_units():
    def mean(level, f):
        return sum(f(generate_problem(1, i, knobs=LEVELS[level])) for i in range(200)) / 200

    steps = [mean(lv, lambda p: len(p.expressions)) for lv in LEVELS]
    units = [mean(lv, lambda p: "dozen" in p.question or " a day for " in p.question) for lv in LEVELS]
    assert steps[0] < steps[1] < steps[2] and units[0] == 0 < units[1] < units[2]
    assert mean("hard", lambda p: len(p.question.split(". ")) - 2 - len(p.expressions)) == 2  # two distractors


def test_a_dict_of_knobs_and_the_level_is_recorded():
    env = gym.make("AgentR1/GSM8K-v0", difficulty={"distractors": 1})
    assert env.reset(seed=0)[1]["env"] == {"difficulty": "custom"}
    env = gym.make(
        "AgentR1/GSM8K-v0", difficulty={"min_steps": 4, "max_steps": 5, "distractors": 2, "units": 0.5, "scale": 10}
    )
    assert env.reset(seed=0)[1]["env"] == {"difficulty": "hard"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"difficulty": "extreme"}, r"unknown difficulty 'extreme'.*'easy', 'medium', 'hard'"),
        ({"difficulty": {"distractor": 1}}, r"unknown difficulty knob\(s\) \['distractor'\].*'distractors'"),
        ({"difficulty": {"min_steps": 5, "max_steps": 3}}, "min_steps .5. is more than max_steps .3."),
        ({"difficulty": "hard", "max_steps": 3}, "min_steps .4. is more than max_steps .3."),
        ({"difficulty": {"units": 1.5}}, r"units must be a number in \[0, 1\]"),
        ({"difficulty": {"scale": 0}}, r"scale must be an int in \[1, 100\]"),
        ({"difficulty": 3}, "must be one of"),
    ],
)
def test_bad_difficulty_is_a_named_error_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        gym.make("AgentR1/GSM8K-v0", **kwargs)


def test_difficulty_is_refused_on_a_real_source(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"question": "1+1?", "answer": "#### 2"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="options of source='synthetic'"):
        gym.make("AgentR1/GSM8K-v0", source=str(path), difficulty="hard")
