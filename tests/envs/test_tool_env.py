import json
import math

import gymnasium as gym
import pytest

import agentgym_r1  # noqa: F401
from agentgym_r1.core.env import Grade
from agentgym_r1.core.tools import BaseTool, ToolResult
from agentgym_r1.error import ConfigError, InvalidToolSchemaError, RewardFunctionError, UnknownOptionError


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def fail() -> str:
    """Always fails."""
    raise RuntimeError("down")


TASKS = [{"id": "t1", "prompt": "What is 2 + 3?", "answer": "5"}, {"id": "t2", "prompt": "1 + 1?", "answer": "2"}]


def call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def make(**kw):
    return gym.make("AgentR1/ToolEnv-v0", tools=[add, fail], tasks=TASKS, **kw)


def test_system_prompt_lists_tool_schemas_and_task():
    env = make()
    obs, info = env.reset(options={"task_id": "t1"})
    assert '"name": "add"' in obs and '"name": "fail"' in obs
    assert obs.endswith("What is 2 + 3?")
    assert [m["role"] for m in env.unwrapped.transcript.messages()] == ["system", "user"]
    assert env.unwrapped.tool_schemas()[0]["function"]["parameters"]["required"] == ["a", "b"]


def test_process_rewards_per_call_and_outcome():
    env = make(valid_call_reward=0.1, failed_call_penalty=-0.2)
    env.reset(options={"task_id": "t1"})
    obs, r, term, trunc, info = env.step(call("add", a=2, b=3) + call("fail") + call("nope") + call("add", a="x", b=1))
    assert obs.count("<tool_response>") == 4 and "<tool_response>\n5\n</tool_response>" in obs
    assert "RuntimeError: down" in obs and "unknown tool 'nope'" in obs and "invalid arguments for add" in obs
    assert info["reward_parts"] == {"outcome": 0.0, "process": pytest.approx(0.1 - 0.2 * 3), "format": 0.0}
    assert info["valid"] is False and "unknown tool" in info["error"]
    roles = [m["role"] for m in env.unwrapped.transcript.messages()]
    assert roles[-4:] == ["tool"] * 4
    obs, r, term, trunc, info = env.step("The answer: <answer>5</answer>")
    assert (r, term, trunc, info["success"], info["metrics"]) == (1.0, True, False, True, {"em": 1.0})


def test_invalid_action_gets_format_penalty_and_goes_on():
    env = make(format_penalty=-0.5)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("I think it is five")
    assert not term and r == -0.5 and info["action"]["kind"] == "invalid"
    assert obs == info["error"] and "Invalid action" in obs


def test_turn_limit_truncates_and_episode_end_is_reported():
    env = make(max_episode_steps=2)
    env.reset(seed=0)
    env.step(call("add", a=1, b=1))
    obs, r, term, trunc, info = env.step(call("add", a=1, b=1))
    assert (term, trunc, info["episode_end"], info["success"]) == (False, True, "turn_limit", False)
    env.reset(seed=0)
    env.step(call("add", a=1, b=1))
    _, _, term, trunc, info = env.step("<answer>2</answer>")
    assert (term, trunc, info["episode_end"]) == (True, False, "terminated")


def test_custom_reward_and_tool_reward_and_command_parser():
    class Bonus(BaseTool):
        name = "bonus"
        description = "gives a reward"
        parameters = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
        timeout = None

        def __call__(self, q):
            return ToolResult(True, q.upper(), reward=0.25)

    env = gym.make(
        "AgentR1/ToolEnv-v0",
        tools=[Bonus()],
        tasks=TASKS,
        parser="command",
        reward_fn=lambda pred, task: Grade(0.5, False, {"len": float(len(pred))}),
    )
    env.reset(options={"index": 0})
    obs, r, *_, info = env.step("bonus[hi]")
    assert obs == "HI" and r == 0.25 and info["action"]["calls"][0] == {"name": "bonus", "arguments": {"q": "hi"}}
    obs, r, *_, info = env.step("shout[hi]")
    assert "unknown command 'shout'" in obs
    _, r, term, _, info = env.step("answer[abc]")
    assert (r, term, info["success"], info["metrics"]) == (0.5, True, False, {"len": 3.0})


def test_programmer_errors_are_named():
    with pytest.raises(UnknownOptionError, match="tols"):
        gym.make("AgentR1/ToolEnv-v0", tols=[add], tasks=TASKS)
    with pytest.raises(ConfigError, match="no tasks"):
        gym.make("AgentR1/ToolEnv-v0", tools=[add])
    with pytest.raises(ConfigError, match="index"):
        make().reset(options={"index": 99})
    with pytest.raises(ConfigError, match="no task with id"):
        make().reset(options={"task_id": "zzz"})
    with pytest.raises(InvalidToolSchemaError):
        gym.make("AgentR1/ToolEnv-v0", tools=["notatool"], tasks=TASKS)
    with pytest.raises(ConfigError, match="render_mode"):
        make(render_mode="human")


def test_render_ansi_is_the_transcript():
    env = make(render_mode="ansi")
    env.reset(seed=1)
    env.step("<answer>2</answer>")
    assert env.render() == env.unwrapped.transcript.text


def test_non_finite_rewards_count_as_zero_and_nan_penalties_are_refused():
    def nan_reward(prediction, task):
        return Grade(float("nan"), False, {})

    env = make(reward_fn=nan_reward)
    env.reset(seed=0)
    with pytest.warns(RuntimeWarning, match="outcome reward"):
        _, reward, term, _, info = env.step("<answer>5</answer>")
    assert term and reward == 0.0 and info["reward_parts"]["outcome"] == 0.0

    class InfReward(BaseTool):
        name, description, timeout = "inf", "inf reward", None
        parameters = {"type": "object", "properties": {}}

        def __call__(self):
            return ToolResult(True, "x", float("inf"))

    env = gym.make("AgentR1/ToolEnv-v0", tools=[InfReward()], tasks=TASKS)
    env.reset(seed=0)
    obs, reward, _, _, info = env.step(call("inf"))
    assert reward == 0.0 and math.isfinite(info["reward_parts"]["process"]) and "not a finite number" in obs
    for option in ("format_penalty", "valid_call_reward", "failed_call_penalty"):
        with pytest.raises(ConfigError, match=option):
            make(**{option: float("nan")})


@pytest.mark.parametrize(
    "value",
    [float("inf"), -float("inf"), 10**400, Grade(float("inf"), True, {})],
    ids=["inf", "-inf", "10**400", "Grade(inf, True)"],
)
def test_a_non_finite_reward_is_never_a_success(value):
    def reward(prediction, task):
        return value

    env = make(reward_fn=reward)
    env.reset(seed=0)
    with pytest.warns(RuntimeWarning, match="outcome reward"):
        _, reward_, term, _, info = env.step("<answer>5</answer>")
    assert term and reward_ == 0.0 and info["success"] is False


@pytest.mark.parametrize("value", ["1.0", None, [1.0], Grade("1", True, {})])
def test_a_reward_fn_returning_a_wrong_type_is_a_named_error_naming_it(value):
    def my_reward(prediction, task):
        return value

    env = make(reward_fn=my_reward)
    env.reset(seed=0)
    with pytest.raises(RewardFunctionError, match=r"reward_fn .*my_reward returned a .*(str|NoneType|list)"):
        env.step("<answer>5</answer>")


def test_a_reward_fn_that_cannot_be_one_is_refused_at_construction():
    def says_str(prediction: str, task) -> str:
        return prediction

    with pytest.raises(RewardFunctionError, match=r"says_str is annotated to return str"):
        make(reward_fn=says_str)
    with pytest.raises(RewardFunctionError, match="must be a function"):
        make(reward_fn="exact_match")
    assert make(reward_fn=lambda p, t: 1.0) is not None  # unannotated: checked at the first answer
