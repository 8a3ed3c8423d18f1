"""Soak the OpenEnv env server: many episodes over concurrent sessions, with the server's memory and open file
descriptors sampled as it goes. Loopback only; stops by itself after ``--episodes``.

The server is the real command (``agentgym-r1 serve env ...``) in a subprocess; the clients are openenv-core's own
async ``EnvClient`` (:class:`agentgym_r1.envs.remote.AgentEnvClient`), ``--sessions`` of them at once in one event
loop. Each client plays ``--reconnect-every`` episodes on one session, then closes it and opens a new one, so
sessions are both reused and churned. Prints one line per sample (episodes done, server RSS, server fds, live envs)
and a summary (sessions per second, steps per second); exits 1 if the server's fds are not back to their idle count or
its RSS grew by more than ``--max-growth-mib`` over the second half of the run.

    python benchmarks/openenv_soak.py --episodes 5000 --sessions 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A calculator call, a malformed call and an answer: GSM8K episodes end on the answer; other envs play these
# until their turn limit.
ACTIONS = (
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>',
    "<tool_call>{broken",
    "<answer>4</answer>",
)


@dataclass
class Soak:
    episodes: int = 0  # claimed
    done: int = 0  # played to the end (or failed)
    steps: int = 0
    errors: list[str] = field(default_factory=list)
    samples: list[tuple[int, float, int]] = field(default_factory=list)  # episodes, server RSS MiB, server fds


def server_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def server_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def live_envs(url: str) -> int:
    import httpx

    return int(httpx.get(f"{url}/sessions", timeout=10).json()["live_envs"])


@contextlib.contextmanager
def server(env_id: str, env_kwargs: list[str], sessions: int):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "agentgym_r1.cli",
        "serve",
        "env",
        env_id,
        *env_kwargs,
        "--port",
        str(port),
        "--max-sessions",
        str(sessions),
        "--idle-timeout",
        "120",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}: {proc.stderr.read()}")
            with contextlib.suppress(Exception):
                live_envs(url)
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start within 120 s")
            time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


async def client(
    url: str, soak: Soak, total: int, reconnect_every: int, sample_every: int, pid: int, connect_timeout_s: float
) -> None:
    from agentgym_r1.envs.openenv_wire import AgentAction
    from agentgym_r1.envs.remote import AgentEnvClient

    while soak.episodes < total:
        async with AgentEnvClient(url, connect_timeout_s=connect_timeout_s) as session:
            for _ in range(reconnect_every):
                if soak.episodes >= total:
                    break
                seed = soak.episodes
                soak.episodes += 1  # claimed before the awaits, so the clients together play exactly ``total``
                try:
                    result = await session.reset(seed=seed)
                    turn = 0
                    while not result.done:
                        result = await session.step(AgentAction(text=ACTIONS[turn % len(ACTIONS)]))
                        soak.steps, turn = soak.steps + 1, turn + 1
                except Exception as e:  # recorded, not raised: the soak counts failures
                    soak.errors.append(f"episode {seed}: {type(e).__name__}: {e}")
                soak.done += 1
                if soak.done % sample_every == 0:
                    soak.samples.append((soak.done, server_rss_mib(pid), server_fds(pid)))


def in_process(env_id: str, env_kwargs: tuple[str, ...], episodes: int) -> tuple[float, int]:
    """The same episodes played in-process, one env, no server: (seconds, steps)."""
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the ids)
    from agentgym_r1.serve.openenv_server import parse_env_kwargs

    env = gym.make(env_id, **parse_env_kwargs(list(env_kwargs)))
    steps, start = 0, time.perf_counter()
    for seed in range(episodes):
        env.reset(seed=seed)
        terminated = truncated = False
        turn = 0
        while not (terminated or truncated):
            _, _, terminated, truncated, _ = env.step(ACTIONS[turn % len(ACTIONS)])
            steps, turn = steps + 1, turn + 1
    env.close()
    return time.perf_counter() - start, steps


def run(
    env_id: str = "AgentR1/GSM8K-v0",
    env_kwargs: tuple[str, ...] = ("source=synthetic",),
    episodes: int = 5000,
    sessions: int = 16,
    reconnect_every: int = 50,
    samples: int = 20,
    connect_timeout_s: float = 10.0,
) -> dict:
    """Run the soak and return its figures (also used by the short version in the tests)."""
    with server(env_id, list(env_kwargs), sessions) as (url, proc):

        def play(soak: Soak, total: int) -> float:
            async def main() -> None:
                every = max(1, total // samples)
                await asyncio.gather(
                    *(
                        client(url, soak, total, reconnect_every, every, proc.pid, connect_timeout_s)
                        for _ in range(sessions)
                    )
                )

            start = time.perf_counter()
            asyncio.run(main())
            seconds = time.perf_counter() - start
            deadline = time.monotonic() + 30
            while live_envs(url) and time.monotonic() < deadline:
                time.sleep(0.1)
            return seconds

        # Warm-up: one episode per session, so what an env loads once per process (a retriever's index, a cache)
        # is loaded before the idle figures are taken.
        warm = Soak()
        play(warm, sessions)
        idle_fds, idle_rss = server_fds(proc.pid), server_rss_mib(proc.pid)
        soak = Soak(errors=warm.errors)
        seconds = play(soak, episodes)
        deadline = time.monotonic() + 10  # a closed socket's descriptor may go a moment after its env
        while server_fds(proc.pid) > idle_fds and time.monotonic() < deadline:
            time.sleep(0.1)
        after = (server_fds(proc.pid), server_rss_mib(proc.pid), live_envs(url))
    half = [rss for n, rss, _ in soak.samples if n >= episodes // 2]
    return {
        "episodes": soak.done,
        "steps": soak.steps,
        "errors": soak.errors,
        "seconds": seconds,
        "idle_fds": idle_fds,
        "idle_rss_mib": idle_rss,
        "samples": soak.samples,
        "fds_after": after[0],
        "rss_after_mib": after[1],
        "live_envs_after": after[2],
        "max_fds": max((f for _, _, f in soak.samples), default=idle_fds),
        "rss_growth_second_half_mib": (half[-1] - half[0]) if len(half) > 1 else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="AgentR1/GSM8K-v0")
    p.add_argument("--env-kwargs", nargs="*", default=["source=synthetic"])
    p.add_argument("--episodes", type=int, default=5000)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--reconnect-every", type=int, default=50)
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--max-growth-mib", type=float, default=8.0)
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds a client waits for its session")
    p.add_argument("--in-process", type=int, default=1000, help="also play this many episodes in-process (0: no)")
    args = p.parse_args(argv)
    r = run(
        args.env,
        tuple(args.env_kwargs),
        args.episodes,
        args.sessions,
        args.reconnect_every,
        args.samples,
        args.connect_timeout,
    )
    if args.in_process:
        seconds, steps = in_process(args.env, tuple(args.env_kwargs), args.in_process)
        print(
            f"in-process, same actions, one env, no server: {args.in_process} episodes in {seconds:.1f} s "
            f"({args.in_process / seconds:.0f} episodes/s, {steps / seconds:.0f} steps/s)"
        )
    return 0 if report(r, args.env, args.sessions, args.reconnect_every, args.max_growth_mib) else 1


def report(r: dict, env_id: str, sessions: int, reconnect_every: int, max_growth_mib: float) -> bool:
    """Print the figures of :func:`run`; whether memory and descriptors stayed flat."""
    print(f"{'episodes':>9} {'RSS MiB':>8} {'fds':>5}")
    print(f"{'idle':>9} {r['idle_rss_mib']:8.1f} {r['idle_fds']:5d}   (after a warm-up episode per session)")
    for n, rss, fds in r["samples"]:
        print(f"{n:9d} {rss:8.1f} {fds:5d}")
    print(
        f"{'after':>9} {r['rss_after_mib']:8.1f} {r['fds_after']:5d}   (all clients closed; live envs "
        f"{r['live_envs_after']})"
    )
    print(
        f"{env_id}: {r['episodes']} episodes, {r['steps']} steps, {sessions} sessions, reconnect every "
        f"{reconnect_every}: {r['seconds']:.1f} s ({r['episodes'] / r['seconds']:.0f} episodes/s, "
        f"{r['steps'] / r['seconds']:.0f} steps/s); errors {len(r['errors'])}"
    )
    print(
        f"server fds: idle {r['idle_fds']}, max during the run {r['max_fds']}, after {r['fds_after']}; "
        f"RSS growth over the second half {r['rss_growth_second_half_mib']:+.1f} MiB"
    )
    for e in r["errors"][:5]:
        print("  error:", e)
    flat = (
        r["fds_after"] <= r["idle_fds"]
        and r["live_envs_after"] == 0
        and r["rss_growth_second_half_mib"] <= max_growth_mib
        and not r["errors"]
    )
    print("flat: yes" if flat else "flat: NO")
    return flat


if __name__ == "__main__":
    sys.exit(main())
