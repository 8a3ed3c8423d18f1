"""One conformance suite over every registered env: Gymnasium's checker, the info schema, spans and fuzzing."""

from __future__ import annotations

import itertools
import json
import math
import time

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgym_r1.core.env import INFO_KEYS
from agentgym_r1.core.fuzz import worst_shapes
from agentgym_r1.error import ResetNeeded, UnknownOptionError
from tests.conftest import ALL_ENV_IDS, make_env

ADVERSARIAL = [
    "",
    " ",
    "<tool_call>",
    "<tool_call>{not json}</tool_call>",
    '<tool_call>{"name": "calculator"}</tool_call>',
    '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": 7}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9**9"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "__import__(\'os\')"}}</tool_call>',
    "<tool_call>" + "[" * 5000 + "</tool_call>",
    '<tool_call>{"name": "_echo", "arguments": {"text": "' + "x" * 50_000 + '"}}</tool_call>',
    "<answer>",
    "<answer><answer>42</answer></answer>",
    "<think>let me think <answer>1</answer>",
    "<search>unclosed",
    "<search></search><search>a</search>",
    "search[",
    "click[[]]",
    "answer[]",
    "\x00\x01\x02\x1b[31m\u202e\ufeff",
    "x" * 200_000,
    "go to the moon",
    "put apple in fridge; open fridge",
    "打开冰箱",
    "#### ",
    "\\boxed{",
    "\\boxed{\\frac{1}{2}}",
]


def _check_info(info: dict, env: gym.Env, action: str) -> None:
    assert tuple(k for k in info if k != "episode_end") == INFO_KEYS
    assert isinstance(info["turn"], int)
    assert info["action"]["kind"] in ("tool_call", "answer", "command", "invalid")
    assert isinstance(info["valid"], bool)
    assert info["error"] is None or isinstance(info["error"], str)
    if not info["valid"]:
        assert info["error"]
    parts = info["reward_parts"]
    assert set(parts) == {"outcome", "process", "format"}
    assert all(math.isfinite(v) for v in parts.values())
    assert math.isclose(info["reward"], sum(parts.values()))
    assert isinstance(info["success"], bool)
    assert isinstance(info["metrics"], dict)
    assert isinstance(info["env"], dict)
    spans = info["spans"]
    kept = _kept(env, action)
    assert spans[0].source == "agent" and spans[0].end - spans[0].start == len(kept)
    assert env.unwrapped.transcript.text[spans[0].start : spans[0].end] == kept
    assert all(s.source == "env" for s in spans[1:])


def _kept(env: gym.Env, action: str) -> str:
    """What the transcript keeps of an action: all of it, or its first characters up to the env's limit."""
    return action[: env.unwrapped.action_space.max_length]


def _check_transcript(env: gym.Env, actions: list[str]) -> None:
    t = env.unwrapped.transcript
    spans = t.spans
    assert spans[0].start == 0 and spans[-1].end == len(t.text)
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    assert t.agent_text() == "".join(_kept(env, a) for a in actions)


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_check_env(env_id):
    env = make_env(env_id)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_determinism_under_seed(env_id):
    def play(seed):
        env = make_env(env_id)
        obs, _ = env.reset(seed=seed)
        seen = [obs]
        for a in ["<answer>1</answer>", "bogus", "search[x]"]:
            obs, r, term, trunc, info = env.step(a)
            seen.append((obs, r, term, trunc, info["reward_parts"]))
            if term or trunc:
                break
        env.close()
        return seen

    assert play(7) == play(7)


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_adversarial_actions_are_data_not_exceptions(env_id):
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    actions: list[str] = []
    for action in ADVERSARIAL:
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        assert env.observation_space.contains(obs)
        assert math.isfinite(reward)
        assert not (terminated and truncated)
        assert ("episode_end" in info) == (terminated or truncated)
        _check_info(info, env, action)
        _check_transcript(env, actions)
        if terminated or truncated:
            obs, _ = env.reset()
            actions = []
    env.close()


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_reset_rejects_unknown_options_and_step_needs_reset(env_id):
    env = make_env(env_id)
    with pytest.raises(UnknownOptionError, match="bogus"):
        env.reset(options={"bogus": 1})
    raw = env.unwrapped
    with pytest.raises(ResetNeeded):
        type(raw)(**{k: v for k, v in env.spec.kwargs.items()}).step("x")
    env.close()


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_constructor_rejects_unknown_options(env_id):
    with pytest.raises(UnknownOptionError, match="no_such_option"):
        make_env(env_id, no_such_option=1)


def _tool_call(name: str, args: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


actions = st.one_of(
    st.text(max_size=300),
    st.sampled_from(ADVERSARIAL),
    st.builds(
        _tool_call,
        st.sampled_from(["calculator", "search", "_echo", "x"]),
        st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=50), st.integers(), st.none()), max_size=3),
    ),
    st.builds(
        lambda t, s: f"<{t}>{s}</{t}>",
        st.sampled_from(["answer", "search", "calculator", "think"]),
        st.text(max_size=50),
    ),
    st.builds(
        lambda v, s: f"{v}[{s}]",
        st.sampled_from(["search", "click", "answer", "go to", "calculator"]),
        st.text(max_size=50),
    ),
)


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_fuzz_actions(env_id):
    env = make_env(env_id)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**16), episode=st.lists(actions, min_size=1, max_size=10))
    def run(seed, episode):
        obs, info = env.reset(seed=seed)
        assert env.observation_space.contains(obs)
        given_actions: list[str] = []
        for action in episode:
            obs, reward, terminated, truncated, info = env.step(action)
            given_actions.append(action)
            assert env.observation_space.contains(obs)
            assert math.isfinite(reward)
            _check_info(info, env, action)
            if terminated or truncated:
                break
        _check_transcript(env, given_actions)

    run()
    env.close()


# -- a bound on the work of one step, for the worst shapes at the maximum action length --------------------------------
STEP_CPU_BOUND_S = 2.0  # generous: these shapes took 4 s to 100 s of one step before parsing was linear; now ~0.05 s


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_worst_shapes_at_max_action_length_step_in_bounded_time(env_id):
    env = make_env(env_id)
    env.reset(seed=0)
    slow = {}
    for action in worst_shapes(env.unwrapped.action_space.max_length):
        start = time.thread_time()  # this thread's CPU time: unaffected by other load on the machine
        _, reward, terminated, truncated, info = env.step(action)
        spent = time.thread_time() - start
        assert math.isfinite(reward) and (info["valid"] or info["error"])
        if spent > STEP_CPU_BOUND_S:
            slow[action[:30]] = spent
        if terminated or truncated:
            env.reset()
    env.close()
    assert not slow, f"steps over {STEP_CPU_BOUND_S} s of CPU: {slow}"


# -- the first observation tells a model what it may do -------------------------------------------------------------
# Ids kept only for their old observations (they start with the task alone), each with the successor that instructs.
UNINSTRUCTED = {"AgentR1/ALFWorld-v0": "AgentR1/ALFWorld-v1"}


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_first_observation_says_how_to_act(env_id):
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    messages = env.unwrapped.transcript.messages()
    tools = [schema["function"]["name"] for schema in env.unwrapped.tool_schemas()]
    env.close()
    if env_id in UNINSTRUCTED:
        assert [m["role"] for m in messages] == ["user"] and UNINSTRUCTED[env_id] in ALL_ENV_IDS
        return
    system = messages[0]
    assert system["role"] == "system" and obs.startswith(system["content"])
    assert tools and all(name in system["content"] for name in tools), (tools, system["content"])
    assert "<tool_call>" in system["content"]  # the call's syntax, not only the tool's name


# -- memory: an over-long action is kept cut to the limit ----------------------------------------------------------
@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_an_action_over_the_limit_is_kept_cut_to_it(env_id):
    """A 10 MB action is refused with an error observation, and the transcript keeps only its first characters up to
    the limit (it kept all 10 MB of each such step, and a server echoed them back)."""
    env = make_env(env_id)
    env.reset(seed=0)
    limit = env.unwrapped.action_space.max_length
    before = len(env.unwrapped.transcript)
    huge = "<tool_call>" + "é" * 10_000_000
    obs, reward, terminated, _, info = env.step(huge)
    assert not info["valid"] and "more than the limit" in info["error"] and info["error"] in obs
    assert info["reward_parts"]["format"] <= 0 and not terminated
    agent = info["spans"][0]
    assert agent.source == "agent" and env.unwrapped.transcript.text[agent.start : agent.end] == huge[:limit]
    assert len(env.unwrapped.transcript) == before + limit + len(obs)
    _check_transcript(env, [huge])
    env.close()
