"""Difficulty levels of ALFWorld's generated games: easy unchanged, harder levels solvable by construction (their
plan replayed on the real TextWorld engine), bigger rooms, named errors."""

from __future__ import annotations

import hashlib
import json

import gymnasium as gym
import pytest

pytest.importorskip("textworld")
pytest.importorskip("fast_downward")
pytest.importorskip("alfworld")

import agentgym_r1  # noqa: F401
from agentgym_r1.envs.alfworld.generator import LEVELS, TASK_TYPES, Knobs, generate, make_game
from agentgym_r1.error import ConfigError

# The PDDL problems of seed 11's first tries, as the generator wrote them before difficulty levels existed.
EASY_PROBLEMS = (
    "a70b1550a59a3505f896db17f5857fe95e753d71",
    "d1c3eb8ae6ec89610f28a0482157696967e39bad",
    "02d1efb55375e9516220fde6390499f0edc96388",
    "6c3fda7d75c333e0c238495d93937a80ffd4d5c8",
    "ba6062c5a19aa183eda69874570bc202925ca0a5",
    "65e26f11be968df09bcf49d53ceda742b504324a",
)
PINNED = {
    "easy": (
        "put some book on shelf",
        "examine the pot with the desklamp",
        "put a clean spoon in drawer",
        "put a hot tomato in fridge",
        "put a cool potato in garbagecan",
        "find two candle and put them in coffeetable",
    ),
    "hard": (
        "put a spraybottle in garbagecan",
        "look at mug under the desklamp",
        "put a clean plate in cabinet",
        "heat some bread and put it in countertop",
        "put a cool tomato in microwave",
        "put two cloth in dresser",
    ),
}


def test_easy_is_the_original_generator_draw_for_draw():
    for i, task_type in enumerate(TASK_TYPES):
        spec, data = make_game(11, i, task_type, 0)
        assert hashlib.sha1(data["pddl_problem"].encode()).hexdigest() == EASY_PROBLEMS[i]
        assert make_game(11, i, task_type, 0, LEVELS["easy"])[1] == data
    assert LEVELS["easy"] == Knobs() and Knobs().planned and not LEVELS["hard"].planned


@pytest.mark.parametrize("level", list(PINNED))
def test_the_same_seed_and_level_give_the_same_task(level):
    assert (
        tuple(make_game(11, i, t, 0, LEVELS[level])[0].description for i, t in enumerate(TASK_TYPES)) == PINNED[level]
    )


@pytest.mark.parametrize("level", ["medium", "hard"])
def test_harder_rooms_are_bigger_and_made_without_the_planner(level, tmp_path):
    knobs = LEVELS[level]
    for i in range(12):
        data = json.loads(generate(5, i, TASK_TYPES, tmp_path, knobs).read_text())
        assert data["solvable"] and "walkthrough" not in data  # solvable by construction: no planner ran
        assert data["generator"]["difficulty"] == json.loads(json.dumps(knobs.__dict__))
        receptacles = data["pddl_problem"].split("(:objects", 1)[1].split(")", 1)[0].count(" - receptacle")
        assert receptacles >= knobs.min_receptacles
    assert generate(5, 0, TASK_TYPES, tmp_path, knobs) != generate(5, 0, TASK_TYPES, tmp_path)  # own cache files


@pytest.mark.parametrize("level", ["medium", "hard"])
def test_every_task_type_is_won_by_the_experts_plan_on_the_real_engine(level, tmp_path):
    env = gym.make("AgentR1/ALFWorld-v0", difficulty=level, seed=3, cache_dir=str(tmp_path)).unwrapped
    try:
        for i in range(len(TASK_TYPES)):
            obs, info = env.reset(options={"index": i})
            assert info["env"]["difficulty"] == level
            plan = env.expert_plan()
            assert plan and len(plan) < 40  # well inside the turn limit
            for command in plan:
                assert not info["env"]["won"]
                obs, reward, terminated, truncated, info = env.step(command)
                assert info["valid"], (command, obs)
            assert terminated and info["success"], (env.task.prompt, plan)
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"difficulty": "nightmare"}, r"unknown difficulty 'nightmare'.*\['easy', 'medium', 'hard'\]"),
        ({"difficulty": {"receptacles": 40}}, r"unknown difficulty knob\(s\) \['receptacles'\].*'min_receptacles'"),
        ({"difficulty": {"min_distractors": 30, "max_distractors": 20}}, r"min_distractors \(30\) is more than"),
        ({"difficulty": {"min_receptacles": 500}}, r"min_receptacles must be an int in \[0, 60\]"),
        ({"difficulty": {"closed": 2}}, r"closed must be a number in \[0, 1\]"),
        ({"source": "/nonexistent", "difficulty": "hard"}, "difficulty is for source='generated'"),
    ],
)
def test_bad_difficulty_is_a_named_error_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        gym.make("AgentR1/ALFWorld-v0", **kwargs)
