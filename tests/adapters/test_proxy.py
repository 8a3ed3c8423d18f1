"""The proxy (#40) with real agents on loopback: the ``openai`` client's tool-calling loop and ``openai-agents`` play
a two-tool task against a tiny model taught its three turns; their sessions become the rollout engine's rows, token
for token; a session whose history was rewritten becomes step rows with the reason; bad requests are 400s; idle
sessions are evicted and counted."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from tests.adapters import proxy_kit as K  # noqa: E402
from tests.serve.conftest import wait_until  # noqa: E402


@pytest.fixture(scope="module")
def taught(tokenizer, chat):
    return K.taught_model(tokenizer, chat)


@pytest.fixture(scope="module")
def proxy(taught, chat):
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.proxy_server import Proxy

    with Proxy(
        HFBackend(taught, chat), chat, "tiny", reward_fn=K.reward, chunk_tokens=64, max_n=4, session_tokens=400
    ) as p:
        yield p


def played(proxy, session: str, **create) -> tuple[list[dict], object]:
    messages = K.openai_agent(proxy.base_url, session, **create)
    proxy.close(session)
    return messages, proxy.batch([session])


def agent_runs(row) -> list[list[int]]:
    """The model's tokens of a row, one list per turn (the runs of mask 1)."""
    runs, current = [], []
    for token, m in zip(row.completion_ids, row.env_mask, strict=True):
        if m:
            current.append(token)
        elif current:
            runs, current = [*runs, current], []
    return [*runs, current] if current else runs


def test_openai_tool_loop_becomes_one_token_exact_row(proxy, chat) -> None:
    from agentgym_r1.adapters.proxy import reply_message

    messages, batch = played(proxy, "loop")
    replies = [m for m in messages if m["role"] == "assistant"]
    assert [c["function"]["name"] for r in replies[:2] for c in r["tool_calls"]] == ["add", "multiply"]
    assert [json.loads(r["tool_calls"][0]["function"]["arguments"]) for r in replies[:2]] == [
        {"a": 2, "b": 3},
        {"a": 5, "b": 4},
    ]
    assert replies[2]["content"] == "The answer is 20." and [m["content"] for m in messages if m["role"] == "tool"] == [
        "5",
        "20",
    ]
    (row,) = batch.samples
    assert batch.layout == "concatenated" and row.reward == 1.0 and row.success
    ids, mask = K.taught_ids(chat)
    assert row.prompt_ids + row.completion_ids == ids
    assert row.env_mask == mask[len(row.prompt_ids) :]
    eos = chat.tokenizer.eos_token
    for run, reply, text in zip(agent_runs(row), replies, K.TURNS, strict=True):
        assert chat.tokenizer.decode(run, skip_special_tokens=False) == text + eos  # the masked tokens, exactly
        parsed = reply_message(chat, proxy.service.reader, chat.decode_action(run), tools=True)
        for call in parsed.get("tool_calls", []):
            call["id"] = None
        for call in reply.get("tool_calls", []):
            call["id"] = None
        assert {k: v for k, v in parsed.items() if v is not None} == reply  # ... and the message the agent got
    agent_lps = [lp for lp, m in zip(row.logprobs, row.env_mask, strict=True) if m]
    assert all(lp < 0 for lp in agent_lps) and all(
        lp == 0.0 for lp, m in zip(row.logprobs, row.env_mask, strict=True) if not m
    )


def test_proxy_rows_equal_the_rollout_engine_rows(proxy, taught, chat) -> None:
    import torch

    from agentgym_r1.adapters import Prompt, RolloutConfig, RolloutEngine, SamplingParams
    from agentgym_r1.adapters.backends.hf import HFBackend

    config = RolloutConfig(samples_per_prompt=1, sampling=SamplingParams(max_new_tokens=64, temperature=0, stop=()))
    engine = RolloutEngine(HFBackend(taught, chat), chat, config)
    try:
        (want,) = engine.rollout([Prompt(K.CalcEnv, seed=0)]).samples
    finally:
        engine.close()
    _, batch = played(proxy, "same-episode")
    (got,) = batch.samples
    for name in ("prompt_ids", "completion_ids", "env_mask", "step_ends", "step_rewards", "reward"):
        assert getattr(got, name) == getattr(want, name), name
    torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want.logprobs), rtol=1e-4, atol=1e-4)


def test_openai_agents_sdk_through_the_proxy(proxy, chat) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is not installed (the dev extra has it)")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def add(a: float, b: float) -> str:
        """Add two numbers."""
        return str(int(a + b))

    @agents.function_tool
    def multiply(a: float, b: float) -> str:
        """Multiply two numbers."""
        return str(int(a * b))

    client = AsyncOpenAI(base_url=proxy.base_url, api_key="sdk-agent", max_retries=0, timeout=60)
    agent = agents.Agent(
        name="calculator",
        instructions=K.SYSTEM,
        tools=[add, multiply],
        model=agents.OpenAIChatCompletionsModel(model="tiny", openai_client=client),
        model_settings=agents.ModelSettings(temperature=0),
    )
    result = agents.Runner.run_sync(agent, K.QUESTION, max_turns=6)
    assert result.final_output == "The answer is 20."
    proxy.close("sdk-agent")
    (row,) = proxy.batch(["sdk-agent"]).samples
    ids, mask = K.taught_ids(chat)
    assert row.prompt_ids + row.completion_ids == ids and row.env_mask == mask[len(row.prompt_ids) :]
    assert row.reward == 1.0


def test_streaming_and_n_choices(proxy) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=proxy.base_url, api_key="stream", max_retries=0, timeout=60)
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=K.first_messages(), tools=K.TOOLS, temperature=0, stream=True
        )
    )
    calls = [c for ch in chunks for d in ch.choices for c in d.delta.tool_calls or []]
    assert [c.function.name for c in calls] == ["add"] and json.loads(calls[0].function.arguments) == {"a": 2, "b": 3}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    reply = client.chat.completions.create(model="tiny", messages=K.first_messages(), tools=K.TOOLS, n=3, temperature=0)
    assert len(reply.choices) == 3 and all(c.message.tool_calls[0].function.name == "add" for c in reply.choices)
    session = proxy.sessions.get("stream")
    assert [len(c.choices) for c in session.calls] == [1, 3]
    # the second call repeats the first's messages without its reply: a new chain, so step rows, with the reason
    assert session.layout == "step" and "call 1" in session.why


def test_rewritten_history_becomes_step_rows_with_the_reason(proxy, chat) -> None:
    from openai import OpenAI

    from agentgym_r1.adapters.proxy import batch_of

    client = OpenAI(base_url=proxy.base_url, api_key="rewrite", max_retries=0, timeout=60)
    first = client.chat.completions.create(model="tiny", messages=K.first_messages(), tools=K.TOOLS, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    # the agent shortens its system prompt before the second call: the prompts no longer extend each other
    history = [
        {"role": "system", "content": "Calculator."},
        {"role": "user", "content": K.QUESTION},
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    client.chat.completions.create(model="tiny", messages=history, tools=K.TOOLS, temperature=0)
    session = proxy.sessions.get("rewrite")
    assert session.layout == "step"
    assert session.why.startswith("call 1: message 0 differs") and "at token" in session.why
    proxy.close("rewrite", reward=0.5)
    (taken,) = proxy.sessions.take(["rewrite"])
    rows = batch_of([taken]).samples
    assert len(rows) == 2 and all(r.episode_id == "rewrite" for r in rows)
    raw = [*history[:2], {"role": "assistant", "content": K.TURNS[0]}, {"role": "tool", "content": "5"}]
    assert rows[1].prompt_ids == chat.prompt_ids(raw)  # the second row's prompt is what the model saw, as rendered
    assert rows[1].prompt_ids[: len(rows[0].prompt_ids)] != rows[0].prompt_ids
    (failed,) = batch_of([taken], layout="concatenated").samples  # a one-row layout never re-tokenizes it
    assert failed.failed


def test_the_tools_may_change_when_the_tokens_still_extend(proxy) -> None:
    """Tools this template does not render: the call is rendered afresh, and its prompt still extends the last
    prompt and completion token for token, so the session stays one row."""
    from openai import OpenAI

    client = OpenAI(base_url=proxy.base_url, api_key="retool", max_retries=0, timeout=60)
    first = client.chat.completions.create(model="tiny", messages=K.first_messages(), tools=K.TOOLS, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    history = [
        *K.first_messages(),
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    client.chat.completions.create(model="tiny", messages=history, tools=K.TOOLS[:1], temperature=0)
    assert proxy.sessions.get("retool").layout == "concatenated"


def post(url: str, body: object, session: str | None = "bounds", **headers: str) -> httpx.Response:
    if session is not None:
        headers["X-Session-Id"] = session
    return httpx.post(
        url, content=json.dumps(body), headers={"content-type": "application/json", **headers}, timeout=60
    )


def test_bad_requests_are_openai_400s_and_the_server_goes_on(proxy) -> None:
    url = proxy.base_url + "/chat/completions"
    cases = [
        ({"messages": [{"role": "user", "content": "12 plus 7? " * 3000}]}, "context_length_exceeded", "messages"),
        ({"messages": K.first_messages(), "n": 5}, "invalid_value", "n"),
        ({"messages": K.first_messages(), "max_tokens": 1000}, "context_length_exceeded", "max_tokens"),
        ({"messages": K.first_messages(), "tool_choice": "sometimes"}, "invalid_value", "tool_choice"),
        ({"messages": [{"role": "assistant", "content": None}]}, "invalid_value", "messages.0"),
        ({"messages": K.first_messages(), "tools": [{"type": "function", "function": {}}]}, None, None),
    ]
    for body, code, param in cases:
        r = post(url, body)
        assert r.status_code == 400, (body, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error"
        if code is not None:
            assert (error["code"], error["param"]) == (code, param), error
    r = post(url, {"messages": K.first_messages()}, session=None)
    assert r.status_code == 400 and r.json()["error"]["code"] == "missing_session"
    r = httpx.post(proxy.base_url + "/sessions/nobody/reward", json={"reward": 1.0}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_session"
    ok = post(url, {"messages": K.first_messages(), "tools": K.TOOLS, "temperature": 0})
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "tool_calls"
    r = httpx.post(proxy.base_url + "/sessions/bounds/reward", content='{"reward": NaN}', timeout=30)
    assert r.status_code == 400
    r = httpx.post(proxy.base_url + "/sessions/bounds/reward", json={"reward": 0.25}, timeout=30)
    assert r.status_code == 200 and r.json()["closed"] and r.json()["reward"] == 0.25
    r = post(url, {"messages": K.first_messages()})
    assert r.status_code == 400 and r.json()["error"]["code"] == "session_closed"


def test_idle_sessions_are_evicted_and_counted(taught, chat) -> None:
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.proxy_server import Proxy

    with Proxy(HFBackend(taught, chat), chat, session_timeout_s=2.0, max_sessions=1) as proxy:
        url = proxy.base_url + "/chat/completions"
        assert post(url, {"messages": K.first_messages(), "max_tokens": 4}, session="idle").status_code == 200
        r = post(url, {"messages": K.first_messages(), "max_tokens": 4}, session="other")
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_sessions"
        health = proxy.base_url.removesuffix("/v1") + "/health"
        wait_until(lambda: httpx.get(health, timeout=30).json()["evicted_open"] == 1, 30, "the idle session's eviction")
        assert httpx.get(health, timeout=30).json()["sessions"] == 0
        assert post(url, {"messages": K.first_messages(), "max_tokens": 4}, session="other").status_code == 200


@pytest.mark.parametrize(
    ("option", "value"),
    [("session_timeout_s", float("nan")), ("max_sessions", 0), ("session_tokens", -1), ("temperature", -1.0)],
)
def test_bad_proxy_options_are_refused_before_any_work(taught, chat, option, value) -> None:
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.proxy_server import Proxy
    from agentgym_r1.error import ConfigError

    with pytest.raises(ConfigError, match=option):
        Proxy(HFBackend(taught, chat), chat, **{option: value})


def test_serve_proxy_command_refuses_a_missing_model(tmp_path, capsys) -> None:
    from agentgym_r1.cli import main

    assert main(["serve", "proxy", "--model", str(tmp_path / "missing"), "--port", "0"]) == 2
    assert "missing" in capsys.readouterr().err
