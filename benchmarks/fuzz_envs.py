"""Fuzz campaign: replay the adversarial action corpus on every registered env, with every parser, and report what
broke.

For each env, with each parser that reads text differently (the env's own; ``parser="auto"`` outside the engine, the
families' documented formats; and the parser ``parser="auto"`` builds for each model family's tokenizer, one per
distinct response template TRL pairs with its text-only chat templates, Gemma 4 included; plus GSM8K with
``parser="command"`` and HotpotQA with ``parser="tag"``), it steps every action of
:func:`agentgym_r1.core.fuzz.adversarial_actions` (the named worst shapes and every family's markers at the maximum
action length, hostile values in each format's calls, then seeded random mixtures), resetting when an episode ends,
and prints: actions stepped, exceptions raised by ``step`` (must be 0), the worst step (wall and this thread's CPU
time) with the shape that took longest, the median, and the growth of the process's peak RSS; then the worst step per
parser over every env. Exit status 1 if any step raised.

With ``--big-actions MB`` it measures memory instead: 3 sessions (env instances kept open, as a server keeps them) per
env take 5 actions of MB megabytes each, and it prints the resident memory they keep and the transcript's length
(exit status 1 if a transcript keeps more than the action limit of an action); with ``--served``, the resident memory
of an env server (``serve env`` in a subprocess on 127.0.0.1) after 3 /ws sessions took them.

    PYTHONPATH=. python benchmarks/fuzz_envs.py                       # the full campaign (minutes)
    PYTHONPATH=. python benchmarks/fuzz_envs.py --parser gemma4       # one family's parser on every env
    PYTHONPATH=. python benchmarks/fuzz_envs.py --count 5 --max-chars 5000 --budget-s 5   # CI (test_fuzz_envs.py)
    PYTHONPATH=. python benchmarks/fuzz_envs.py --big-actions 10      # memory after 10 MB actions
    PYTHONPATH=. python benchmarks/fuzz_envs.py --big-actions 10 --served   # the env server's, over /ws

Target: worst step <= 50 ms at the maximum action length (100,000 characters), with every parser.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any

import gymnasium as gym

import agentgym_r1
from agentgym_r1.core.fuzz import adversarial_actions
from agentgym_r1.core.sandbox import bwrap_problem


def _echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: what to echo
    """
    return text


ENV_KWARGS: dict[str, dict[str, Any]] = {
    "AgentR1/ToolEnv-v0": {"tools": [_echo], "tasks": [{"prompt": "Say hi.", "answer": "hi"}]},
    "AgentR1/ALFWorld-v0": {"source": "generated", "num_games": 3},
    "AgentR1/ALFWorld-v1": {"source": "generated", "num_games": 3},
    # where bwrap cannot run, the python tool runs fuzzed text as code only under rlimits (opted into: not isolation)
    "AgentR1/PythonMath-v0": {"sandbox": "bwrap" if bwrap_problem() is None else "rlimits"},
}
VARIANTS: list[tuple[str, str, Any]] = [
    ("AgentR1/GSM8K-v0", "command", "command"),
    ("AgentR1/HotpotQA-v0", "tag", "tag"),
]


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _rss_mib() -> float:
    """The resident memory now (Linux's /proc; the peak where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return _peak_rss_mib()


def family_parsers(only: list[str] | None = None) -> dict[str, Any]:
    """The parser ``parser="auto"`` builds for each text-only TRL chat template (over a tiny tokenizer with the
    family's tokens), one per distinct reader, named by the shortest template name that has it (``gemma4``, not
    ``diffusion_gemma``); empty without TRL."""
    try:
        from agentgym_r1.adapters import ChatTokenizer
        from agentgym_r1.adapters.families import trl_text_templates
        from agentgym_r1.adapters.native import native_parser
        from agentgym_r1.adapters.scratch import family_tokenizer, train_tokenizer
        from agentgym_r1.testing import gsm8k_corpus
    except ImportError as e:
        print(f"(no family parsers: {e})")
        return {}
    templates = {n: t for n, t in trl_text_templates().items() if not n.endswith("_training")}
    parsers, seen = {}, set()
    with tempfile.TemporaryDirectory() as tmp:
        base = train_tokenizer(gsm8k_corpus(30), tmp, vocab_size=400)
        for name in sorted(templates, key=lambda n: (len(n), n)):
            if only and name not in only:
                continue
            parser = native_parser(ChatTokenizer(family_tokenizer(base, templates[name])))
            reader = parser.reader
            key = (repr(getattr(reader, "template", reader)), getattr(reader, "prefix", ""))
            if key not in seen:
                seen.add(key)
                parsers[name] = parser
    return parsers


def fuzz_env(env_id: str, parser: Any, actions: list[str], budget_s: float) -> dict[str, Any]:
    kwargs = {} if parser is None else {"parser": parser}
    env = gym.make(env_id, **{**ENV_KWARGS.get(env_id, {}), **kwargs})
    env.reset(seed=0)
    rss0, times, errors = _peak_rss_mib(), [], []
    worst, worst_cpu = (0.0, ""), 0.0
    start = time.perf_counter()
    for i, action in enumerate(actions):
        if time.perf_counter() - start > budget_s:
            break
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            _, _, terminated, truncated, _ = env.step(action)
        except Exception as e:  # the campaign counts them; a step must never raise on model text
            errors.append(f"action {i} ({action[:40]!r}...): {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)
            env.reset(seed=i)
            continue
        spent, cpu = time.perf_counter() - t0, time.thread_time() - c0
        times.append(spent)
        worst, worst_cpu = max(worst, (spent, action[:24])), max(worst_cpu, cpu)
        if terminated or truncated:
            env.reset(seed=i)
    env.close()
    return {
        "steps": len(times),
        "exceptions": errors,
        "worst_ms": worst[0] * 1e3,
        "worst_shape": worst[1],
        "worst_cpu_ms": worst_cpu * 1e3,
        "median_ms": statistics.median(times) * 1e3 if times else 0.0,
        "rss_growth_mib": _peak_rss_mib() - rss0,
    }


def campaign(args: argparse.Namespace) -> int:
    actions = adversarial_actions(args.count, args.max_chars, args.seed)
    parsers: dict[str, Any] = {"default": None, "auto": "auto", **family_parsers(args.parser)}
    if args.parser:
        parsers = {k: v for k, v in parsers.items() if k in args.parser}
    targets = [(e, name, p) for e in agentgym_r1.env_ids() for name, p in parsers.items()]
    targets += [v for v in VARIANTS if not args.parser or v[1] in args.parser]
    if args.env:
        targets = [t for t in targets if t[0] in args.env]
    print(
        f"{len(actions)} actions up to {args.max_chars:,} characters; {len(targets)} env x parser pairs; budget "
        f"{args.budget_s:g} s each; parsers: {', '.join(parsers)}"
    )
    print(
        f"{'env':<22} {'parser':<22} {'steps':>5} {'exc':>4} {'worst ms':>9} {'cpu ms':>7} {'median':>7} "
        f"{'RSS+MiB':>7}  worst shape"
    )
    failed, by_parser = 0, {}
    for env_id, name, parser in targets:
        r = fuzz_env(env_id, parser, actions, args.budget_s)
        failed += len(r["exceptions"])
        by_parser[name] = max(by_parser.get(name, (0.0, 0.0, "")), (r["worst_ms"], r["worst_cpu_ms"], env_id))
        print(
            f"{env_id:<22} {name:<22} {r['steps']:>5} {len(r['exceptions']):>4} {r['worst_ms']:>9.1f} "
            f"{r['worst_cpu_ms']:>7.1f} {r['median_ms']:>7.2f} {r['rss_growth_mib']:>7.1f}  {r['worst_shape']!r}",
            flush=True,
        )
        for line in r["exceptions"][:5]:
            print(f"    {line}")
    print("worst step per parser, over every env (wall ms / CPU ms):")
    for name, (wall, cpu, env_id) in by_parser.items():
        print(f"  {name:<22} {wall:>8.1f} / {cpu:>6.1f}  ({env_id})")
    overall = max(by_parser.values(), default=(0.0, 0.0, ""))
    print(
        f"worst step: {overall[0]:.1f} ms wall, worst CPU {max((v[1] for v in by_parser.values()), default=0):.1f} ms"
    )
    print(f"exceptions: {failed}")
    return 1 if failed else 0


def big_actions(args: argparse.Namespace, sessions: int = 3, steps: int = 5) -> int:
    """Memory kept by ``sessions`` open envs per env id after ``steps`` actions of ``args.big_actions`` MB each."""
    print(f"{sessions} sessions x {steps} actions of {args.big_actions:g} MB per env; resident memory kept")
    print(f"{'env':<22} {'RSS +MiB':>9} {'transcript chars':>17}")
    bad = 0
    for env_id in [e for e in agentgym_r1.env_ids() if not args.env or e in args.env]:
        envs = [gym.make(env_id, **ENV_KWARGS.get(env_id, {})) for _ in range(sessions)]
        for env in envs:  # the env's own data (index, catalogue) loaded before the baseline
            env.reset(seed=0)
            env.step("<answer>1</answer>")
            env.reset(seed=0)
        gc.collect()
        before = _rss_mib()
        for env in envs:
            for i in range(steps):
                action = "<tool_call>" + chr(ord("a") + i) * int(args.big_actions * 1_000_000)
                _, _, terminated, truncated, _ = env.step(action)
                del action
                if terminated or truncated:
                    env.reset(seed=i)
        gc.collect()
        kept = max(len(env.unwrapped.transcript) for env in envs)
        limit = envs[0].unwrapped.action_space.max_length
        bad += kept > steps * (limit + envs[0].unwrapped.max_observation_chars)
        print(f"{env_id:<22} {_rss_mib() - before:>9.1f} {kept:>17,}", flush=True)
        for env in envs:
            env.close()
    return 1 if bad else 0


def _process_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def served_big_actions(args: argparse.Namespace, sessions: int = 3, steps: int = 5) -> int:
    """The env server's resident memory (``serve env AgentR1/GSM8K-v0`` in a subprocess on 127.0.0.1) after
    ``sessions`` /ws sessions took ``steps`` actions of ``args.big_actions`` MB each (Linux: /proc)."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentgym_r1.cli",
            "serve",
            "env",
            "AgentR1/GSM8K-v0",
            "source=synthetic",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.1)
        envs = [gym.make("AgentR1/Remote-v0", url=f"http://127.0.0.1:{port}") for _ in range(sessions)]
        for env in envs:
            env.reset(seed=0)
        before = _process_rss_mib(server.pid)
        for env in envs:
            for i in range(steps):
                env.step("<tool_call>" + chr(ord("a") + i) * int(args.big_actions * 1_000_000))
        after = _process_rss_mib(server.pid)
        kept = max(len(env.unwrapped.transcript) for env in envs)
        print(
            f"served AgentR1/GSM8K-v0, {sessions} /ws sessions x {steps} actions of {args.big_actions:g} MB: server "
            f"RSS {before:.1f} -> {after:.1f} MiB (+{after - before:.1f}); client transcript {kept:,} chars"
        )
        for env in envs:
            env.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300, help="random mixtures after the named and native shapes")
    ap.add_argument("--max-chars", type=int, default=100_000, help="the longest action (the envs' limit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=120.0, help="seconds per env and parser at most")
    ap.add_argument("--env", action="append", help="only these env ids (repeatable)")
    ap.add_argument(
        "--parser",
        action="append",
        help="only these parsers: default, auto, command, tag or a TRL template name such as gemma4 (repeatable)",
    )
    ap.add_argument(
        "--big-actions", type=float, default=0.0, metavar="MB", help="measure memory after MB-sized actions instead"
    )
    ap.add_argument("--served", action="store_true", help="with --big-actions: through the env server's /ws")
    args = ap.parse_args(argv)
    if args.big_actions:
        return served_big_actions(args) if args.served else big_actions(args)
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())
