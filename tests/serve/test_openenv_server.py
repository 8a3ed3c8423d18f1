"""Every registered env served by openenv-core's server and played by openenv-core's own client over loopback:
the same observations, rewards and info as in-process; sessions capped, closed when idle, on disconnect and when a
client is killed; bad input answered with a clear error and a status code, and logged."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from tests.serve.conftest import served, sessions, skip_without_serve, wait_until

skip_without_serve()

import httpx  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from agentgym_r1.envs.openenv_wire import jsonable  # noqa: E402
from agentgym_r1.error import ConfigError, RemoteEnvError, SessionLimitError, UnknownOptionError  # noqa: E402
from agentgym_r1.leaderboard.models import make_policy  # noqa: E402
from tests.conftest import ALL_ENV_IDS, ENV_KWARGS, make_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ODD_ACTIONS = ["", "<tool_call>{not json}</tool_call>", "<answer>", "search[", "打开冰箱\x00", "x" * 5000]


def _local_episode(env_id: str, policy_name: str, seed: int) -> tuple[list[str], list[tuple]]:
    """Play ``policy_name`` in-process; the actions and (obs, reward, terminated, truncated, info) of each call."""
    env = make_env(env_id)
    policy = make_policy(policy_name, env_id, seed=seed)
    obs, info = env.reset(seed=seed)
    policy.reset(env, obs, info)
    results, actions = [(obs, None, False, False, info)], []
    terminated = truncated = False
    while not (terminated or truncated):
        action = policy.act(obs, info) if len(actions) < 4 or policy_name == "oracle" else ODD_ACTIONS[0]
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        results.append((obs, reward, terminated, truncated, info))
    env.close()
    return actions, results


def _same(local: tuple, remote) -> None:
    obs, reward, terminated, truncated, info = local
    o = remote.observation
    assert o["text"] == obs
    assert remote.reward == reward
    assert (o["terminated"], o["truncated"], remote.done) == (terminated, truncated, terminated or truncated)
    assert o["info"] == json.loads(json.dumps(jsonable(info)))


@pytest.mark.parametrize("env_id", ALL_ENV_IDS)
def test_openenv_client_plays_every_env_as_in_process(env_id):
    episodes = [(*_local_episode(env_id, "oracle", seed=3), 3), (*_local_episode(env_id, "random", seed=5), 5)]
    with served(env_id, ENV_KWARGS.get(env_id, {})) as url:
        health = httpx.get(f"{url}/health", timeout=5).json()
        schema = httpx.get(f"{url}/schema", timeout=5).json()
        with GenericEnvClient(base_url=url).sync() as client:
            for actions, results, seed in episodes:
                _same(results[0], client.reset(seed=seed))
                for action, local in zip(actions, results[1:], strict=True):
                    _same(local, client.step({"text": action}))
            state = client.state()
    assert health == {"status": "healthy"}
    assert schema["action"]["required"] == ["text"]
    assert state["env_id"] == env_id and state["done"] is True and state["task"]["id"]
    assert sum(r[1] or 0 for r in episodes[0][1]) > 0  # the oracle episode was rewarded, and identically


def test_odd_actions_and_reset_options_over_the_socket():
    with served("AgentR1/GSM8K-v0", {"source": "synthetic"}) as url, GenericEnvClient(base_url=url).sync() as client:
        local = make_env("AgentR1/GSM8K-v0")
        obs, info = local.reset(seed=1, options={"index": 7})
        _same((obs, None, False, False, info), client.reset(seed=1, options={"index": 7}))
        for action in ODD_ACTIONS[:5]:
            _same(local.step(action), client.step({"text": action}))
        with pytest.raises(RuntimeError, match="ConfigError: options\\['index'\\]"):
            client.reset(options={"index": -1})
        with pytest.raises(RuntimeError, match="unknown argument"):
            client.reset(seed=1, colour="red")
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"txt": "no such field"})
        assert client.reset(seed=2).observation["text"] == local.reset(seed=2)[0]  # the session went on


def test_http_endpoints_answer_with_status_codes(caplog):
    caplog.set_level(logging.WARNING, logger="agentgym_r1.serve")
    with served("AgentR1/GSM8K-v0", {"source": "synthetic"}) as url:
        ok = httpx.post(f"{url}/reset", json={"seed": 4}, timeout=10)
        bad_option = httpx.post(f"{url}/reset", json={"seed": 4, "options": {"task_id": "nope"}}, timeout=10)
        no_episode = httpx.post(f"{url}/step", json={"action": {"text": "<answer>1</answer>"}}, timeout=10)
        bad_action = httpx.post(f"{url}/step", json={"action": {"words": "hi"}}, timeout=10)
        meta = httpx.get(f"{url}/metadata", timeout=5).json()
    assert ok.status_code == 200 and ok.json()["observation"]["text"] == make_env("AgentR1/GSM8K-v0").reset(seed=4)[0]
    assert bad_option.status_code == 422 and "ConfigError" in bad_option.json()["detail"]
    assert no_episode.status_code == 409 and "/ws" in no_episode.json()["detail"]
    assert bad_action.status_code == 422
    assert meta["name"] == "AgentR1/GSM8K-v0"
    assert sum("refused (422)" in r.getMessage() for r in caplog.records) == 1
    assert sum("refused (409)" in r.getMessage() for r in caplog.records) == 1


def test_unknown_id_and_bad_kwargs_refused_before_serving(tmp_path):
    from agentgym_r1.serve.openenv_server import make_app

    with pytest.raises(ConfigError, match=r"unknown env id 'AgentR1/Nope-v0'.*AgentR1/GSM8K-v0"):
        make_app("AgentR1/Nope-v0")
    with pytest.raises(ConfigError, match="unknown env id 'AgentR1/Remote-v0'"):
        make_app("AgentR1/Remote-v0")
    with pytest.raises(UnknownOptionError, match="sauce"):
        make_app("AgentR1/GSM8K-v0", {"sauce": "synthetic"})
    with pytest.raises(ConfigError, match="max_sessions"):
        make_app("AgentR1/GSM8K-v0", {"source": "synthetic"}, max_sessions=0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym_r1.cli", "serve", "env", "AgentR1/Nope-v0", "--port", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "not serving AgentR1/Nope-v0" in proc.stderr  # logged
    assert "agentgym-r1: error: unknown env id" in proc.stderr


def test_session_cap_clear_error_and_close_code(caplog):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    caplog.set_level(logging.WARNING, logger="agentgym_r1.serve")
    with served("AgentR1/GSM8K-v0", {"source": "synthetic"}, max_sessions=2) as url:
        a = gym.make("AgentR1/Remote-v0", url=url)
        b = gym.make("AgentR1/Remote-v0", url=url)
        with pytest.raises(
            SessionLimitError,
            match=r"(2/2 sessions|cap \(2\)).*Close other sessions or start the server with a larger --max-sessions",
        ):
            gym.make("AgentR1/Remote-v0", url=url)
        with connect(url.replace("http", "ws") + "/ws") as ws:  # the server answers at once, then closes
            error = json.loads(ws.recv(timeout=10))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert error["data"]["code"] == "CAPACITY_REACHED"
        assert closed.value.rcvd.code == 1013
        assert sessions(url)["live_envs"] == 2
        a.close()
        wait_until(lambda: sessions(url)["live_envs"] == 1, 10, "the closed session freed")
        c = gym.make("AgentR1/Remote-v0", url=url)  # the freed slot is taken again
        assert c.reset(seed=0)[0]
        b.close(), c.close()
    assert sum("CAPACITY_REACHED" in r.getMessage() for r in caplog.records) == 2


def test_idle_session_closed_and_reopened_at_next_reset():
    with served("AgentR1/GSM8K-v0", {"source": "synthetic"}, idle_timeout_s=0.5) as url:
        env = gym.make("AgentR1/Remote-v0", url=url)
        first, _ = env.reset(seed=1)
        wait_until(lambda: sessions(url)["live_envs"] == 0, 10, "the idle session closed")
        with pytest.raises(RemoteEnvError, match=r"idle for more than 0\.5 s"):
            env.step("<answer>1</answer>")
        assert env.reset(seed=1)[0] == first  # a new session
        env.close()


def test_killed_client_frees_its_session():
    script = (
        "import sys, gymnasium as gym, agentgym_r1\n"
        "env = gym.make('AgentR1/Remote-v0', url=sys.argv[1])\n"
        "env.reset(seed=0); env.step('hello')\n"
        "print('mid-episode', flush=True); sys.stdin.read()\n"
    )
    with served("AgentR1/GSM8K-v0", {"source": "synthetic"}, max_sessions=1) as url:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, url],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout.readline().strip() == "mid-episode"
            assert sessions(url)["live_envs"] == 1
            with pytest.raises(SessionLimitError):
                gym.make("AgentR1/Remote-v0", url=url)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdin.close(), proc.stdout.close()
        wait_until(lambda: sessions(url)["live_envs"] == 0, 30, "the killed client's session freed")
        env = gym.make("AgentR1/Remote-v0", url=url)  # the one slot is free again
        assert env.reset(seed=0)[0]
        env.close()


class _Raising(gym.Env):
    """An env whose step raises on the action "boom" (a bug in an env, not bad model input)."""

    def __init__(self) -> None:
        self.inner = make_env("AgentR1/GSM8K-v0")
        self.action_space, self.observation_space = self.inner.action_space, self.inner.observation_space
        self.transcript = None

    def reset(self, *, seed=None, options=None):
        if options == {"explode": True}:
            raise RuntimeError("reset kaboom")
        out = self.inner.reset(seed=seed, options=options)
        self.transcript = self.inner.unwrapped.transcript
        return out

    def step(self, action):
        if action == "boom":
            raise RuntimeError("kaboom")
        return self.inner.step(action)


def test_env_that_raises_ends_the_episode_not_the_server(caplog):
    caplog.set_level(logging.ERROR, logger="agentgym_r1.serve")
    gym.register("AgentR1Test/Raising-v0", entry_point=_Raising)
    try:
        with served("AgentR1Test/Raising-v0", max_sessions=2) as url:
            with GenericEnvClient(base_url=url).sync() as client:
                client.reset(seed=0)
                result = client.step({"text": "boom"})
                assert result.done and "RuntimeError: kaboom" in result.observation["info"]["env_error"]
                assert client.reset(seed=0).observation["text"]  # the same session plays on
                with pytest.raises(RuntimeError, match="raised in reset: RuntimeError: reset kaboom"):
                    client.reset(seed=0, options={"explode": True})
                assert client.reset(seed=0).observation["text"]  # ...again, with a fresh env
            env = gym.make("AgentR1/Remote-v0", url=url)
            env.reset(seed=0)
            with pytest.raises(RemoteEnvError, match="raised in step: RuntimeError: kaboom"):
                env.step("boom")
            with pytest.raises(RemoteEnvError, match="raised in reset: RuntimeError: reset kaboom"):
                env.reset(seed=0, options={"explode": True})
            assert env.reset(seed=1)[0]
            env.close()
            assert httpx.get(f"{url}/health", timeout=5).status_code == 200
    finally:
        gym.registry.pop("AgentR1Test/Raising-v0", None)
    assert any("raised in step" in r.getMessage() for r in caplog.records)


def test_concurrent_alfworld_sessions_do_not_share_textworld_state():
    """Four sessions resetting at once: TextWorld's module-global parser must not be entered from two threads (with
    ``single_thread=False`` this fails with TextWorld's ``IndexError: pop from empty list``)."""
    import threading

    errors, done = [], []

    def play(url: str, worker: int) -> None:
        try:
            env = gym.make("AgentR1/Remote-v0", url=url)
            for seed in range(worker * 10, worker * 10 + 4):
                env.reset(seed=seed)
                env.step("look")
            env.close()
            done.append(worker)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    kwargs = ENV_KWARGS["AgentR1/ALFWorld-v0"]
    with served("AgentR1/ALFWorld-v0", kwargs, max_sessions=4) as url:
        threads = [threading.Thread(target=play, args=(url, w)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    assert errors == [] and sorted(done) == [0, 1, 2, 3]
