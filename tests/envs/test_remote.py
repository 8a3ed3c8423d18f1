"""``AgentR1/Remote-v0`` plays a served env like the local one: Gymnasium's checker, the rollout engine and the
leaderboard's episode runner give the same results through it as in-process."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from tests.serve.conftest import served, skip_without_serve

skip_without_serve()

from agentgym_r1.adapters.backends.base import ChatReply  # noqa: E402
from agentgym_r1.adapters.rollout import Prompt, RolloutConfig, RolloutEngine  # noqa: E402
from agentgym_r1.error import ConfigError, RemoteEnvError, ResetNeeded, UnknownOptionError  # noqa: E402
from agentgym_r1.leaderboard.models import make_policy  # noqa: E402
from agentgym_r1.leaderboard.runner import run_episode  # noqa: E402
from tests.conftest import make_env  # noqa: E402

GSM8K = {"source": "synthetic"}


@pytest.fixture(scope="module")
def url():
    with served("AgentR1/GSM8K-v0", GSM8K, max_sessions=8) as base:
        yield base


class ScriptedChat:
    """A chat backend whose replies depend only on the turn: a broken tool call, a calculator call, an answer."""

    REPLIES = (
        '<tool_call>{"name": "calculator"',
        '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>',
        "<answer>42</answer>",
    )

    def chat(self, conversations, params):
        return [
            ChatReply(self.REPLIES[min(sum(m["role"] == "assistant" for m in c), 2)], "stop") for c in conversations
        ]


def test_gymnasium_checker_and_the_local_transcript(url):
    env = gym.make("AgentR1/Remote-v0", url=url)
    check_env(env.unwrapped, skip_render_check=True)
    local = make_env("AgentR1/GSM8K-v0")
    assert env.reset(seed=9) == local.reset(seed=9)
    for action in ScriptedChat.REPLIES:
        assert env.step(action) == local.step(action)
    there, here = env.unwrapped, local.unwrapped
    assert (there.transcript.text, there.transcript.spans, there.transcript.messages()) == (
        here.transcript.text,
        here.transcript.spans,
        here.transcript.messages(),
    )
    assert there.task == here.task and there.grade == here.grade
    assert env.action_space.max_length == local.action_space.max_length
    env.close()


def test_rollout_engine_unchanged(url):
    config = RolloutConfig(samples_per_prompt=2, seed=0)
    remote = RolloutEngine(ScriptedChat(), config=config).rollout(
        [Prompt("AgentR1/Remote-v0", {"url": url}, seed=s) for s in (1, 2, 3)]
    )
    local = RolloutEngine(ScriptedChat(), config=config).rollout(
        [Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in (1, 2, 3)]
    )
    assert len(remote.episodes) == 6
    for there, here in zip(remote.episodes, local.episodes, strict=True):
        there, here = dataclasses.asdict(there), dataclasses.asdict(here)
        assert there.pop("env_id") == "AgentR1/Remote-v0" and here.pop("env_id") == "AgentR1/GSM8K-v0"
        assert there == here
    assert {e.task_id for e in remote.episodes} == {e.task_id for e in local.episodes} != {None}


@pytest.mark.parametrize("policy", ["scripted", "oracle", "random"])
def test_leaderboard_episodes_unchanged(url, policy):
    remote, local = gym.make("AgentR1/Remote-v0", url=url), make_env("AgentR1/GSM8K-v0")
    for seed in (0, 1):
        got = run_episode(remote, make_policy(policy, "AgentR1/GSM8K-v0", seed=seed), seed=seed)
        want = run_episode(local, make_policy(policy, "AgentR1/GSM8K-v0", seed=seed), seed=seed)
        assert got == want
    remote.close()


def test_programmer_errors_raise_as_locally(url):
    env = gym.make("AgentR1/Remote-v0", url=url).unwrapped
    with pytest.raises(ResetNeeded):
        env.step("<answer>1</answer>")
    with pytest.raises(UnknownOptionError, match="colour"):
        env.reset(seed=0, options={"colour": "red"})
    with pytest.raises(ConfigError, match="index"):
        env.reset(seed=0, options={"index": -3})
    with pytest.raises(TypeError, match="strings"):
        env.step(7)
    env.close()
    with pytest.raises(ConfigError, match="url"):
        gym.make("AgentR1/Remote-v0", url="127.0.0.1:1")
    with pytest.raises(RemoteEnvError, match="cannot reach"):
        gym.make("AgentR1/Remote-v0", url="http://127.0.0.1:9", connect_timeout_s=2)
