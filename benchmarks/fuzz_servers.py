"""Server-side fuzz campaign: hostile requests to the env server, the model server and the retriever server.

Starts the three servers on 127.0.0.1, each in its own process: ``agentgym-r1 serve env AgentR1/GSM8K-v0`` (synthetic
source), the OpenAI-compatible model server (:mod:`agentgym_r1.adapters.serve`, a tiny random Qwen2 model built on
the spot) and ``agentgym-r1 serve retriever`` (a small BM25 index built on the spot). Each gets a bounded corpus of
hostile requests: every field with wrong types, negative, zero, huge and non-finite numbers, lone surrogates, huge
bodies, bodies that are not JSON or not objects, deep nesting, integers past 4,300 digits; the env server also gets
binary and malformed ``/ws`` frames and the adversarial action corpus
(:func:`agentgym_r1.core.fuzz.adversarial_actions`) stepped over one session. It prints per server: requests tried,
errors (5xx, dropped ``/ws`` sessions, env errors, hangs: no answer in ``--timeout-s``) and the worst latency with its
case; then the model server's latency for a small request alone and beside the longest legal request (8 choices filling
the context). Exit status 1 on any error.

    PYTHONPATH=. python benchmarks/fuzz_servers.py                          # the full campaign (a few minutes)
    PYTHONPATH=. python benchmarks/fuzz_servers.py --count 5 --max-chars 20000   # the short run CI does
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
NAN, INF = float("nan"), float("inf")
# Values every field is tried with (JSON as Python writes it: NaN and Infinity literals, surrogates as escapes).
HOSTILE_VALUES: list[Any] = [
    -5,
    0,
    1.5,
    "abc",
    "",
    NAN,
    INF,
    -INF,
    10**30,
    2**70,
    -(2**70),
    1e308,
    True,
    None,
    [],
    {},
    [1, "a"],
    {"a": 1},
    "\ud800",
    "x\udfffy",
]
REFUSED_WS_CODES = {"INVALID_JSON", "VALIDATION_ERROR", "UNKNOWN_TYPE"}


@dataclass
class Tally:
    """What one server was sent: requests tried, errors and the slowest answer."""

    name: str
    tried: int = 0
    errors: list[str] = field(default_factory=list)
    worst: tuple[float, str] = (0.0, "")

    def timed(self, what: str, seconds: float, error: str | None) -> None:
        self.tried += 1
        if error is not None:
            self.errors.append(f"{what}: {error}")
        if seconds > self.worst[0]:
            self.worst = (seconds, what)

    def line(self) -> str:
        return (
            f"{self.name}: tried {self.tried}, errors {len(self.errors)}, worst latency "
            f"{1000 * self.worst[0]:.0f} ms ({self.worst[1][:60]})"
        )


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def hostile_bodies(max_chars: int) -> list[tuple[str, bytes, str]]:
    """Bodies any JSON endpoint must refuse cleanly: (name, body, content type)."""
    return [
        ("not json", b"not json", "application/json"),
        ("empty", b"", "application/json"),
        ("binary", bytes(range(256)) * 4, "application/json"),
        ("array", b"[1, 2]", "application/json"),
        ("number", b"5", "application/json"),
        ("NaN", b"NaN", "application/json"),
        ("deep nesting", b"[" * 100_000, "application/json"),
        ("deep object", b'{"a":' * 50_000, "application/json"),
        ("5,000 digits", b'{"k": ' + b"1" * 5000 + b"}", "application/json"),
        ("big string", raw({"x": "y" * max_chars}), "application/json"),
        ("text/plain", b'{"a": 1}', "text/plain"),
        ("over 20 MB", b'{"x": "' + b"z" * 21_000_000 + b'"}', "application/json"),
    ]


def post(
    client: httpx.Client, tally: Tally, what: str, url: str, body: bytes, content_type: str = "application/json"
) -> httpx.Response | None:
    """POST ``body``; a 5xx, a hang or a dropped connection is an error."""
    start = time.perf_counter()
    try:
        r = client.post(url, content=body, headers={"content-type": content_type})
    except httpx.TimeoutException:
        tally.timed(what, time.perf_counter() - start, "hang: no answer within the timeout")
        return None
    except httpx.HTTPError as e:
        tally.timed(what, time.perf_counter() - start, f"connection: {type(e).__name__}: {e}")
        return None
    tally.timed(what, time.perf_counter() - start, f"{r.status_code}: {r.text[:200]}" if r.status_code >= 500 else None)
    return r


def fields_crossed(base: dict[str, Any], fields: list[str], values: list[Any]) -> Iterator[tuple[str, bytes]]:
    for name in fields:
        for value in values:
            yield f"{name}={str(value)[:20]!r}", raw({**base, name: value})


# -- the servers -------------------------------------------------------------------------------------------------------
def serve_model(port: int) -> None:
    """The model server process: a tiny random model behind ``adapters.serve.make_app``."""
    import torch
    import uvicorn

    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.adapters.serve import make_app
    from agentgym_r1.adapters.tokenize import ChatTokenizer
    from agentgym_r1.testing import gsm8k_corpus

    torch.set_num_threads(1)
    tokenizer = train_tokenizer(gsm8k_corpus(20), vocab_size=400)
    chat = ChatTokenizer(tokenizer)
    app = make_app(HFBackend(make_model(tokenizer, hidden=64, layers=2), chat), chat, "tiny", chunk_tokens=16)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def process(argv: list[str], health: str) -> Iterator[subprocess.Popen]:
    """Run a server process until ``health`` answers 200; stop it at the end."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health, timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            raise SystemExit(f"{argv[:4]} did not start: {proc.stderr.read() if proc.poll() is not None else ''}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


# -- the campaigns -----------------------------------------------------------------------------------------------------
def fuzz_model(url: str, args: argparse.Namespace) -> Tally:
    tally, endpoint = Tally("model server"), f"{url}/v1/chat/completions"
    hi = [{"role": "user", "content": "Hi"}]
    base = {"model": "tiny", "messages": hi, "max_tokens": 8}
    cases = list(
        fields_crossed(
            base,
            [
                "max_tokens",
                "max_completion_tokens",
                "temperature",
                "top_p",
                "n",
                "stop",
                "seed",
                "logprobs",
                "stream",
                "messages",
                "model",
            ],
            HOSTILE_VALUES,
        )
    )
    contents = [
        *HOSTILE_VALUES,
        "x" * args.max_chars,
        "x" * 1_000_000,
        [{"type": "text", "text": "\ud800"}],
        [{"type": "image_url"}],
        [[["deep"]]],
    ]
    cases += [
        (f"content={str(c)[:20]!r}", raw({**base, "messages": [{"role": "user", "content": c}]})) for c in contents
    ]
    cases += [(f"role={r!r}", raw({**base, "messages": [{"role": r, "content": "hi"}]})) for r in HOSTILE_VALUES]
    cases += [
        ("100k empty messages", raw({**base, "messages": [{"role": "user", "content": ""}] * 100_000})),
        ("max_tokens=10**9", raw({**base, "max_tokens": 10**9})),
        ("stop of 5", raw({**base, "stop": ["a"] * 5})),
        ("stop of 10k chars", raw({**base, "stop": ["s" * 10_000]})),
    ]
    with httpx.Client(timeout=args.timeout_s) as client:
        for what, body in cases:
            post(client, tally, what, endpoint, body)
        for what, body, content_type in hostile_bodies(args.max_chars):
            post(client, tally, what, endpoint, body, content_type)
        for method, path in (("GET", "/v1/chat/completions"), ("POST", "/v1/nope"), ("DELETE", "/v1/models")):
            start = time.perf_counter()
            r = client.request(method, url + path)
            tally.timed(
                f"{method} {path}", time.perf_counter() - start, f"{r.status_code}" if r.status_code >= 500 else None
            )
    return tally


def small_beside_hostile(url: str, timeout_s: float, probes: int = 8) -> dict[str, float]:
    """Latency of a small request alone, then beside the longest legal request (8 choices filling the context)."""
    endpoint = f"{url}/v1/chat/completions"
    small = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    long = {"messages": [{"role": "user", "content": "What is 12 plus 7? " * 100}], "n": 8, "temperature": 0}
    with httpx.Client(timeout=timeout_s) as client:

        def timed() -> float:
            start = time.perf_counter()
            client.post(endpoint, json=small).raise_for_status()
            return time.perf_counter() - start

        alone = [timed() for _ in range(probes)]
        out: dict[str, float] = {}

        def run_long() -> None:
            start = time.perf_counter()
            client.post(endpoint, json=long).raise_for_status()
            out["long_s"] = time.perf_counter() - start

        thread = threading.Thread(target=run_long)
        thread.start()
        time.sleep(0.3)
        beside = []
        while thread.is_alive() and len(beside) < probes:
            beside.append(timed())
        thread.join()
    return {
        "alone_median_ms": 1000 * statistics.median(alone),
        "beside_median_ms": 1000 * statistics.median(beside),
        "beside_worst_ms": 1000 * max(beside),
        "beside_probes": len(beside),
        "long_s": out["long_s"],
    }


def fuzz_env(url: str, args: argparse.Namespace) -> Tally:
    from agentgym_r1.core.fuzz import adversarial_actions

    tally = Tally("env server")
    with httpx.Client(timeout=args.timeout_s) as client:
        for what, body in fields_crossed({"seed": 1}, ["seed", "options", "episode_id"], HOSTILE_VALUES):
            post(client, tally, f"/reset {what}", f"{url}/reset", body)
        for what, body in fields_crossed({"action": {"text": "hi"}}, ["action"], HOSTILE_VALUES):
            post(client, tally, f"/step {what}", f"{url}/step", body)
        for what, body, content_type in hostile_bodies(args.max_chars):
            post(client, tally, f"/reset {what}", f"{url}/reset", body, content_type)
    frames: list[tuple[str, str | bytes]] = [
        ("binary frame", b"\x00\xff" * 100),
        ("array", "[1, 2]"),
        ("number", "5"),
        ("string", '"reset"'),
        ("null", "null"),
        ("deep nesting", "[" * 100_000),
        ("5,000 digits", '{"type": "reset", "data": {"seed": ' + "1" * 5000 + "}}"),
        ("not json", "{nope"),
        ("type list", '{"type": ["reset"]}'),
        ("data list", '{"type": "reset", "data": [1]}'),
        ("unknown type", '{"type": "explode"}'),
    ]
    frames += [
        (f"ws reset {name}={str(value)[:20]!r}", json.dumps({"type": "reset", "data": {name: value}}))
        for name in ("seed", "options", "episode_id")
        for value in HOSTILE_VALUES
    ]
    frames += [
        (f"ws reset then step {what}", json.dumps({"type": "step", "data": {"text": value}}))
        for what, value in (
            ("surrogate answer", r"<answer>\ud800</answer>"),
            (
                "surrogate call",
                r'<tool_call>{"name": "calculator", "arguments": '
                r'{"expression": "\ud800"}}</tool_call>',
            ),
            ("raw surrogate", "<answer>\ud800</answer>"),
            ("1e999 call", '<tool_call>{"name": "calculator", "arguments": {"expression": 1e999}}</tool_call>'),
        )
    ]
    actions = adversarial_actions(args.count, args.max_chars)
    frames += [
        (f"ws step action #{i} ({len(a)} chars)", json.dumps({"type": "step", "data": {"text": a}}))
        for i, a in enumerate(actions)
    ]
    ws_session(url, frames, tally, args.timeout_s)
    return tally


def ws_session(url: str, frames: list[tuple[str, str | bytes]], tally: Tally, timeout_s: float) -> None:
    """Send each frame over one ``/ws`` session (a step after a fresh reset); a dropped session, a session error,
    an env error or an unnamed execution error is an error (the session is then reopened)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    reset = json.dumps({"type": "reset", "data": {"seed": 1}})
    pending = list(reversed(frames))
    while pending:
        with connect(url.replace("http", "ws") + "/ws", max_size=None, open_timeout=timeout_s) as ws:
            while pending:
                what, frame = pending.pop()
                start = time.perf_counter()
                try:
                    if '"type": "step"' in str(frame)[:30]:
                        ws.send(reset)
                        ws.recv(timeout=timeout_s)
                    ws.send(frame)
                    error = ws_error(json.loads(ws.recv(timeout=timeout_s)))
                except TimeoutError:
                    error = "hang: no answer within the timeout"
                except ConnectionClosed as e:
                    tally.timed(what, time.perf_counter() - start, f"dropped session: {e}")
                    break  # reopen a session for the frames left
                tally.timed(what, time.perf_counter() - start, error)


def ws_error(answer: dict[str, Any]) -> str | None:
    """What is wrong with a ``/ws`` answer, if anything: a refusal of a bad message or of bad reset arguments (named
    errors) is right; another error, or an observation carrying an env error, is not."""
    data = answer.get("data", {})
    if answer["type"] == "error" and data.get("code") not in REFUSED_WS_CODES:
        message = str(data.get("message", ""))
        if not message.startswith(("ConfigError:", "UnknownOptionError:", "ResetNeeded:")):
            return f"{data.get('code')}: {message[:200]}"
    elif answer["type"] == "observation" and "env_error" in data.get("observation", {}).get("info", {}):
        return f"env_error: {data['observation']['info']['env_error'][:200]}"
    return None


def fuzz_retriever(url: str, args: argparse.Namespace) -> Tally:
    tally, endpoint = Tally("retriever server"), f"{url}/retrieve"
    base = {"queries": ["reef"], "k": 2}
    queries = [*[[v] for v in HOSTILE_VALUES], *HOSTILE_VALUES, ["q"] * 600, ["x" * args.max_chars], ["a\ud800 reef"]]
    with httpx.Client(timeout=args.timeout_s) as client:
        for what, body in [*fields_crossed(base, ["k"], HOSTILE_VALUES), *fields_crossed(base, ["queries"], queries)]:
            post(client, tally, what, endpoint, body)
        for what, body, content_type in hostile_bodies(args.max_chars):
            post(client, tally, what, endpoint, body, content_type)
    return tally


def build_index(path: Path) -> None:
    from agentgym_r1.retrieval import build_retriever
    from agentgym_r1.retrieval.base import Document

    docs = [Document(str(i), f"Title {i}", f"The coral reef number {i} lies in sea {i % 7}.") for i in range(200)]
    build_retriever("bm25", docs, path, cache=False).close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="random adversarial actions stepped over /ws")
    parser.add_argument("--max-chars", type=int, default=100_000, help="the longest action and query")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="a request unanswered this long is a hang")
    parser.add_argument("--serve-model", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model is not None:
        serve_model(args.serve_model)
        return 0
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    cli = ["-m", "agentgym_r1.cli", "serve"]
    with tempfile.TemporaryDirectory() as tmp:
        build_index(Path(tmp) / "index")
        with (
            process(
                [*cli, "env", "AgentR1/GSM8K-v0", "source=synthetic", "--port", str(ports[0])], f"{urls[0]}/health"
            ),
            process([__file__, "--serve-model", str(ports[1])], f"{urls[1]}/health"),
            process(
                [*cli, "retriever", "--index", str(Path(tmp) / "index"), "--port", str(ports[2])], f"{urls[2]}/health"
            ),
        ):
            tallies = [fuzz_env(urls[0], args), fuzz_model(urls[1], args), fuzz_retriever(urls[2], args)]
            latency = small_beside_hostile(urls[1], args.timeout_s)
    for tally in tallies:
        print(tally.line())
        for error in tally.errors[:20]:
            print(f"  {error}")
    print(
        f"model server, a small request (4 tokens): alone median {latency['alone_median_ms']:.0f} ms; beside the "
        f"longest legal request (8 choices filling the 2,048-token context, {latency['long_s']:.1f} s) median "
        f"{latency['beside_median_ms']:.0f} ms, worst {latency['beside_worst_ms']:.0f} ms "
        f"({latency['beside_probes']} probes)"
    )
    return 1 if any(t.errors for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
