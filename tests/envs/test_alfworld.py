"""ALFWorld on the real TextWorld engine: real games won by the planner expert, generated games won by their plan,
bad input as data, named errors for missing extras, data and broken files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("textworld")
pytest.importorskip("fast_downward")
pytest.importorskip("alfworld")

from agentgym_r1.envs.alfworld import ALFWorldEnv
from agentgym_r1.envs.alfworld.data import list_games
from agentgym_r1.envs.alfworld.expert import scripted_plan
from agentgym_r1.envs.alfworld.generator import TASK_TYPES, generate, shipped_logic
from agentgym_r1.error import (
    ConfigError,
    DataFormatError,
    DataNotFoundError,
    DependencyNotInstalled,
    ResetNeeded,
)
from agentgym_r1.leaderboard.baselines.alfworld import ExpertPlanPolicy
from agentgym_r1.leaderboard.policies import hermes_call
from tests.conftest import SHARED_DATA, shared_data

REAL_GAMES = sorted((SHARED_DATA / "alfworld" / "json_2.1.1" / "valid_unseen").glob("*/*/game.tw-pddl"))


@pytest.fixture(scope="module")
def real_env():
    env = gym.make("AgentR1/ALFWorld-v0", source=str(shared_data("alfworld")))
    yield env
    env.close()


@pytest.fixture(scope="module")
def gen_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("alfworld-cache"))


@pytest.fixture(scope="module")
def gen_env(gen_cache):
    env = gym.make("AgentR1/ALFWorld-v0", source="generated", seed=11, cache_dir=gen_cache)
    yield env
    env.close()


def play(env, commands):
    info, reward, terminated = {}, 0.0, False
    for command in commands:
        _, reward, terminated, truncated, info = env.step(command)
        assert info["valid"], (command, info["error"])
        if terminated or truncated:
            break
    return reward, terminated, info


# -- real games ---------------------------------------------------------------------------------------------------
def test_the_shared_split_has_24_games_of_six_types(real_env):
    games = real_env.unwrapped.games
    assert len(games) == 24
    types = [games[i].meta["task_type"] for i in range(len(games))]
    assert sorted(set(types)) == sorted(TASK_TYPES) and all(types.count(t) == 4 for t in TASK_TYPES)


@pytest.mark.parametrize("index", range(24))
def test_real_game_is_won_by_the_expert(real_env, index):
    obs, info = real_env.reset(options={"index": index})
    assert "Your task is to:" in obs and obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert info["env"]["game_file"].endswith("game.tw-pddl") and info["env"]["task_type"] in TASK_TYPES
    assert info["env"]["admissible_commands"] and not info["env"]["won"]
    plan = real_env.unwrapped.expert_plan()
    assert plan and all(c == c.lower() for c in plan)
    reward, terminated, info = play(real_env, plan)
    assert terminated and reward == 1.0 and info["success"] and info["metrics"] == {"won": 1.0}
    assert info["episode_end"] == "terminated" and info["env"]["won"]


def test_cached_resets_match_textworlds_own_env(real_env):
    """The compiled-once game plays exactly like a stock TextWorld PddlEnv that ALFWorld builds."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    raw = AlfredInfos(AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True))))
    for episode in range(2):  # the second reset comes from the cache
        obs, info = real_env.reset(options={"index": 16})
        if episode == 0:
            raw.load(info["env"]["game_file"])
        state = raw.reset()
        assert obs == state.feedback and info["env"]["admissible_commands"] == state["admissible_commands"]
        for command in [*real_env.unwrapped.expert_plan()[:3], "look", "inventory"]:
            obs, _, _, _, info = real_env.step(command)
            state, _, _ = raw.step(command)
            assert obs == state.feedback and info["env"]["admissible_commands"] == state["admissible_commands"]
    raw.close()


def test_planner_expert_wins_a_real_game_and_replans_mid_episode(real_env):
    real_env.reset(options={"index": 4})  # pick_and_place: a short plan
    reward, terminated, _ = play(real_env, real_env.unwrapped.expert_plan(planner=True))
    assert terminated and reward == 1.0
    real_env.reset(options={"index": 4})
    scripted = real_env.unwrapped.expert_plan()
    _, _, terminated, _, _ = real_env.step(scripted[0])
    assert not terminated and real_env.unwrapped.expert_plan() == scripted[1:]  # still on the plan: its rest
    rest = real_env.unwrapped.expert_plan(planner=True)  # the planner, from the current state
    assert rest and rest[0] != scripted[0]
    reward, terminated, _ = play(real_env, rest)
    assert terminated and reward == 1.0
    real_env.reset(options={"index": 4})
    real_env.step("inventory")  # a detour: the expert replans with fast-downward
    reward, terminated, _ = play(real_env, real_env.unwrapped.expert_plan())
    assert terminated and reward == 1.0


def test_an_unplayed_real_game_is_not_won(real_env):
    real_env.reset(options={"index": 0})
    for _ in range(3):
        _, reward, terminated, _, info = real_env.step("look")
        assert reward == 0.0 and not terminated and not info["success"]


def test_data_dir_filters_by_task_type_and_split():
    root = str(shared_data("alfworld"))
    env = ALFWorldEnv(source=root, task_types=["look_at_obj_in_light", 6])
    types = {env.games[i].meta["task_type"] for i in range(len(env.games))}
    assert len(env.games) == 8 and types == {"look_at_obj_in_light", "pick_two_obj_and_place"}
    split_dir = ALFWorldEnv(source=root + "/json_2.1.1/valid_unseen", task_types=[3])
    assert len(split_dir.games) == 4
    with pytest.raises(DataNotFoundError, match="alfworld-download"):
        ALFWorldEnv(source=root, split="train")
    with pytest.raises(ConfigError, match="unknown ALFWorld task type"):
        ALFWorldEnv(source=root, task_types=["juggle"])
    with pytest.raises(ConfigError, match="unknown ALFWorld split"):
        ALFWorldEnv(source=root, split="test")


def test_alfworld_data_env_var(monkeypatch, tmp_path):
    root = shared_data("alfworld")
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    assert len(ALFWorldEnv(source="alfworld").games) == 24
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataNotFoundError, match="alfworld-download") as e:
        ALFWorldEnv(source="alfworld")
    assert "missing" in str(e.value)


def test_missing_source_directory_names_the_download_command(tmp_path):
    with pytest.raises(DataNotFoundError, match="alfworld-download"):
        ALFWorldEnv(source=str(tmp_path / "nope"))
    (tmp_path / "json_2.1.1" / "valid_unseen").mkdir(parents=True)
    with pytest.raises(DataNotFoundError, match=r"no solvable game\.tw-pddl"):
        ALFWorldEnv(source=str(tmp_path))


# -- generated games ----------------------------------------------------------------------------------------------
def test_generated_games_of_each_type_are_won_by_their_walkthrough(gen_env):
    for index, task_type in enumerate(TASK_TYPES):
        obs, info = gen_env.reset(options={"index": index})
        data = json.loads(Path(info["env"]["game_file"]).read_text(encoding="utf-8"))
        assert data["solvable"] is True and data["task_type"] == task_type == info["env"]["task_type"]
        assert f"Your task is to: {data['task_desc']}." in obs
        assert gen_env.unwrapped.task.prompt == f"{data['task_desc']}."
        domain, grammar = shipped_logic()
        assert data["pddl_domain"] == domain and data["grammar"] == grammar.replace("UNKNOWN GOAL", data["task_desc"])
        reward, terminated, info = play(gen_env, data["walkthrough"])
        assert terminated and reward == 1.0 and info["success"], task_type
        gen_env.reset(options={"index": index})  # the scripted expert reads the newer grammar ("move o to r") too
        reward, terminated, _ = play(gen_env, scripted_plan(gen_env.unwrapped.engine.game, task_type))
        assert terminated and reward == 1.0, task_type


def test_generated_game_walkthrough_minus_its_last_step_does_not_win(gen_env):
    _, info = gen_env.reset(options={"index": 5})
    walkthrough = json.loads(Path(info["env"]["game_file"]).read_text(encoding="utf-8"))["walkthrough"]
    reward, terminated, info = play(gen_env, walkthrough[:-1])
    assert not terminated and reward == 0.0 and not info["success"]


def test_generation_is_seeded_and_cached(tmp_path, gen_cache):
    a = generate(11, 2, TASK_TYPES, gen_cache)
    b = generate(11, 2, TASK_TYPES, tmp_path)
    assert a != b and a.read_text() == b.read_text()
    c = generate(12, 2, TASK_TYPES, tmp_path)
    assert json.loads(c.read_text())["pddl_problem"] != json.loads(b.read_text())["pddl_problem"]
    mtime = b.stat().st_mtime_ns
    assert generate(11, 2, TASK_TYPES, tmp_path) == b and b.stat().st_mtime_ns == mtime


def test_generated_source_is_unlimited_or_capped(gen_cache):
    env = ALFWorldEnv(source="generated", seed=11, cache_dir=gen_cache)
    assert len(env.games) >= 2**31 - 1
    assert env.games.by_id("generated-11-3").meta["task_type"] == TASK_TYPES[3]
    capped = ALFWorldEnv(source="generated", seed=11, cache_dir=gen_cache, num_games=2)
    assert len(capped.games) == 2
    with pytest.raises(ConfigError):
        capped.reset(options={"index": 2})
    with pytest.raises(ConfigError, match="num_games"):
        ALFWorldEnv(source="generated", num_games=0)
    only_heat = ALFWorldEnv(
        source="generated", seed=11, cache_dir=gen_cache, task_types=["pick_heat_then_place_in_recep"]
    )
    _, info = only_heat.reset(options={"index": 1})
    assert info["env"]["task_type"] == "pick_heat_then_place_in_recep"
    for e in (env, capped, only_heat):
        e.close()


def test_same_seed_same_game(gen_cache):
    env = gym.make("AgentR1/ALFWorld-v0", source="generated", seed=11, num_games=6, cache_dir=gen_cache)
    first, info1 = env.reset(seed=3)
    second, info2 = env.reset(seed=3)
    assert first == second and info1["env"]["task_id"] == info2["env"]["task_id"]
    env.close()


# -- actions ------------------------------------------------------------------------------------------------------
def test_hermes_tool_calls_and_plain_text_both_act(gen_env):
    _, info = gen_env.reset(options={"index": 0})
    plan = gen_env.unwrapped.expert_plan()
    obs, _, _, _, info = gen_env.step(hermes_call("act", command=plan[0]))
    assert info["valid"] and info["action"] == {
        "kind": "tool_call",
        "calls": [{"name": "act", "arguments": {"command": plan[0]}}],
    }
    assert obs.startswith("<tool_response>\nYou arrive at") and obs.endswith("\n</tool_response>")
    assert gen_env.unwrapped.transcript.messages()[-1]["role"] == "tool"
    obs, _, _, _, info = gen_env.step(f"  > {plan[1].upper()}.  ")
    assert info["valid"] and info["action"] == {"kind": "command", "verb": plan[1].split()[0], "arg": plan[1]}
    assert obs.startswith(("You pick up", "You open"))


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("", "the command is empty"),
        ("   \n ", "the command is empty"),
        ("打开冰箱", "not an English command"),
        ("go to desk 1; take mug 1 from desk 1", "2 commands in one action"),
        ("look\ninventory", "2 commands in one action"),
        ('<tool_call>{"name": "act", "arguments": {"command": "look"}}</tool_call>' * 2, "2 tool calls"),
        ('<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>', "unknown tool 'search'"),
        ('<tool_call>{"name": "act", "arguments": {"command": 7}}</tool_call>', "exactly one argument"),
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ("\x00\x1b[31m", "characters no command uses"),
    ],
)
def test_unreadable_actions_are_invalid_with_a_format_penalty(gen_env, action, message):
    gen_env.reset(options={"index": 0})
    obs, reward, terminated, truncated, info = gen_env.step(action)
    assert not info["valid"] and message in info["error"] and message in obs
    assert reward == pytest.approx(-0.1) and info["reward_parts"]["format"] == pytest.approx(-0.1)
    assert not terminated and not truncated
    assert info["env"]["admissible_commands"]


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("take unicorn 1 from countertop 1", 'Nothing happens. There is no "unicorn 1" in this room.'),
        ("go to the moon", 'Nothing happens. There is no "the moon" in this room.'),
        ("dance wildly", 'Nothing happens. "dance wildly" is not a command. The commands are: '),
        ("inventory please", "is not a command"),
    ],
)
def test_unknown_objects_and_verbs_do_nothing_and_say_why(gen_env, action, expected):
    gen_env.reset(options={"index": 0})
    obs, reward, terminated, _, info = gen_env.step(action)
    assert obs.startswith(expected) or expected in obs
    assert not info["valid"] and info["error"] in obs and reward == 0.0 and not terminated
    assert info["reward_parts"]["format"] == 0.0


def test_nothing_happens_is_marked_invalid_and_the_episode_goes_on(gen_env):
    _, info = gen_env.reset(options={"index": 0})
    receptacle = info["env"]["admissible_commands"][0].removeprefix("go to ")
    obs, _, _, _, info = gen_env.step(f"close {receptacle}")  # not there yet: ALFWorld says nothing happens
    assert obs == "Nothing happens." and not info["valid"] and info["error"] == "Nothing happens."
    obs, _, _, _, info = gen_env.step("think: first find the object")
    assert obs == "OK." and info["valid"]
    reward, terminated, _ = play(gen_env, gen_env.unwrapped.expert_plan())
    assert terminated and reward == 1.0


def test_step_penalty_and_system_prompt(gen_cache):
    env = gym.make(
        "AgentR1/ALFWorld-v0",
        source="generated",
        seed=11,
        cache_dir=gen_cache,
        step_penalty=-0.01,
        system_prompt="Be brief.",
    )
    obs, _ = env.reset(options={"index": 0})
    assert obs.startswith("Be brief.\n\n-= Welcome to TextWorld")
    assert env.unwrapped.transcript.messages()[0] == {"role": "system", "content": "Be brief."}
    _, reward, _, _, info = env.step("look")
    assert reward == pytest.approx(-0.01) and info["reward_parts"]["process"] == pytest.approx(-0.01)
    _, reward, _, _, info = env.step("")
    assert info["reward_parts"] == pytest.approx({"outcome": 0.0, "process": -0.01, "format": -0.1})
    env.close()
    with pytest.raises(ResetNeeded):
        env.unwrapped.step("look")


def test_expert_policy_wins_with_tool_calls(gen_env):
    policy = ExpertPlanPolicy(tool_call=True)
    obs, info = gen_env.reset(options={"index": 4})
    policy.reset(gen_env, obs, info)
    for _ in range(50):
        obs, reward, terminated, truncated, info = gen_env.step(policy.act(obs, info))
        if terminated or truncated:
            break
    assert terminated and reward == 1.0 and info["action"]["kind"] == "tool_call"


def test_reset_after_close_and_sys_argv_is_left_alone(gen_cache):
    argv = sys.argv[:]
    env = ALFWorldEnv(source="generated", seed=11, cache_dir=gen_cache)
    first, _ = env.reset(options={"index": 1})
    game = env.engine.game
    env.close()
    again, _ = env.reset(options={"index": 1})
    assert again == first and env.engine.game is game  # the compiled game came from the cache
    env.close()
    env.close()
    assert sys.argv == argv


# -- errors -------------------------------------------------------------------------------------------------------
def _split_with(tmp_path, text):
    trial = tmp_path / "json_2.1.1" / "valid_unseen" / "pick_and_place_simple-Mug-None-Desk-1" / "trial_1"
    trial.mkdir(parents=True)
    (trial / "game.tw-pddl").write_text(text)
    return trial / "game.tw-pddl"


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"pddl_domain": "x"}),
        json.dumps({"pddl_domain": "(define", "grammar": "nope", "pddl_problem": "(", "solvable": True}),
    ],
)
def test_a_broken_game_file_raises_a_named_error_naming_it(tmp_path, text):
    path = _split_with(tmp_path, text)
    env = ALFWorldEnv(source=str(tmp_path))
    with pytest.raises(DataFormatError, match="ALFWorld game file") as e:
        env.reset()
    assert str(path) in str(e.value)
    env.close()


def test_unsolvable_games_are_skipped(tmp_path):
    _split_with(tmp_path, json.dumps({"pddl_domain": "", "grammar": "", "pddl_problem": "", "solvable": False}))
    list_games.cache_clear()
    with pytest.raises(DataNotFoundError, match="no solvable"):
        ALFWorldEnv(source=str(tmp_path))


def test_missing_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(DependencyNotInstalled, match=r'pip install "agentgym-r1\[alfworld\]"'):
        ALFWorldEnv()


def test_game_file_reset_option_plays_any_game(gen_env):
    path = REAL_GAMES[0] if REAL_GAMES else None
    if path is None:
        pytest.skip("shared ALFWorld data not found")
    obs, info = gen_env.reset(options={"game_file": str(path)})
    assert info["env"]["game_file"] == str(path) and "Your task is to:" in obs
    assert info["env"]["task_type"] == path.parent.parent.name.split("-")[0]
    reward, terminated, _ = play(gen_env, gen_env.unwrapped.expert_plan())
    assert terminated and reward == 1.0


def test_v1_opens_with_the_instructions_and_v0_keeps_its_first_observation(gen_cache):
    from agentgym_r1.envs.alfworld.env import INSTRUCTIONS

    kwargs = {"source": "generated", "seed": 11, "num_games": 2, "cache_dir": gen_cache}
    old, new = gym.make("AgentR1/ALFWorld-v0", **kwargs), gym.make("AgentR1/ALFWorld-v1", **kwargs)
    (obs0, _), (obs1, _) = old.reset(seed=3), new.reset(seed=3)
    assert obs1 == f"{INSTRUCTIONS}\n\n{obs0}" and obs0.startswith("-= Welcome to TextWorld")
    assert "act" in INSTRUCTIONS and "go to" in INSTRUCTIONS
    assert new.unwrapped.transcript.messages()[0] == {"role": "system", "content": INSTRUCTIONS}
    assert gym.make("AgentR1/ALFWorld-v1", system_prompt="", **kwargs).reset(seed=3)[0] == obs0
    old.close(), new.close()
