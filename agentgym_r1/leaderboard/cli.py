"""``agentgym-r1 leaderboard run|show|export`` and ``eval --results``: the command-line side of the leaderboard.

Output (the board, progress lines, recovery notices) is written here, never inside the library modules.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_RESULTS = "runs/leaderboard.sqlite"


def add_leaderboard_parser(sub: Any) -> None:
    lb = sub.add_parser("leaderboard", help="run the evaluation suite and show or export the board")
    lsub = lb.add_subparsers(dest="leaderboard_command", required=True)
    run = lsub.add_parser("run", help="evaluate the suite's baselines (and --policy models) on every env")
    run.add_argument("--suite", default="quick", help="quick (minutes) or full")
    run.add_argument("--policy", action="append", default=[],
                     help="a policy to add on every env (hf:PATH, openai:URL#MODEL or a baseline name); repeatable")
    run.add_argument("--only", action="store_true", help="run only the --policy policies, not the suite's baselines")
    run.add_argument("--env", action="append", default=[], help="run only these env ids (repeatable)")
    run.add_argument("--episodes", type=int, default=None, help="episodes per env (default: the suite's)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--workers", type=int, default=None, help="envs run in parallel (default: CPU cores)")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds a model may take for one turn")
    run.add_argument("--html", default=None, help="where to write the HTML board (default: beside the results)")
    run.set_defaults(func=_run)
    show = lsub.add_parser("show", help="print the board in the terminal")
    show.set_defaults(func=_show)
    export = lsub.add_parser("export", help="write the board as markdown, CSV or HTML")
    export.add_argument("--format", choices=("md", "csv", "html"), default="md")
    export.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    export.set_defaults(func=_export)
    for p in (run, show, export):
        p.add_argument("--results", default=DEFAULT_RESULTS, help=f"results file (default: {DEFAULT_RESULTS})")
        p.add_argument("--no-reference", action="store_true", help="leave out the paper's reported rows")


def _open_store(path: str):
    from agentgym_r1.leaderboard.store import ResultsStore

    store = ResultsStore(path)
    if store.recovery:
        print(f"agentgym-r1: warning: {store.recovery}", file=sys.stderr)
    return store


def _jobs(args: argparse.Namespace) -> list:
    from agentgym_r1.error import ConfigError
    from agentgym_r1.leaderboard.jobs import Job
    from agentgym_r1.leaderboard.suites import suite

    entries = suite(args.suite)
    missing = sorted(set(args.env) - {e.env_id for e in entries})
    if missing:
        raise ConfigError(f"{missing} not in suite {args.suite!r}; its envs are {[e.env_id for e in entries]} "
                          f"(evaluate any other env id with `agentgym-r1 eval`)")
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {args.episodes}")
    jobs = []
    for entry in entries:
        if args.env and entry.env_id not in args.env:
            continue
        policies = [*([] if args.only else entry.policies), *args.policy]
        for policy in dict.fromkeys(policies):
            jobs.append(Job(entry.env_id, entry.source, policy, args.seed, args.episodes or entry.episodes,
                            args.suite, args.timeout))
    return jobs


def _run(args: argparse.Namespace) -> int:
    from agentgym_r1.leaderboard.jobs import Progress, run_jobs

    _open_store(args.results).close()  # recovers a damaged file before any worker opens it
    jobs = _jobs(args)
    outcomes = run_jobs(jobs, args.results, workers=args.workers, progress=Progress(every=5))
    store = _open_store(args.results)
    try:
        _print_board(store, not args.no_reference)
        html_path = Path(args.html or Path(args.results).with_suffix(".html"))
        _write(html_path, _render(store, "html", not args.no_reference))
    finally:
        store.close()
    skipped = [o for o in outcomes if o.status == "skipped"]
    failed = [o for o in outcomes if o.status == "failed"]
    print(f"\n{len(outcomes) - len(skipped) - len(failed)} job(s) done, {len(skipped)} skipped, {len(failed)} failed; "
          f"results in {args.results}; HTML board in {html_path}")
    for o in failed:
        print(f"agentgym-r1: failed: {o.job.env_id} {o.job.policy}: {o.message}", file=sys.stderr)
    return 1 if failed else 0


def _render(store, fmt: str, references: bool) -> str:
    from agentgym_r1.leaderboard import render
    from agentgym_r1.leaderboard.board import board

    boards = board(store, references)
    return {"md": render.markdown, "csv": render.to_csv, "html": render.to_html, "text": render.terminal}[fmt](boards)


def _print_board(store, references: bool) -> None:
    if not store.runs():
        print(f"no results in {store.path} yet: run `agentgym-r1 leaderboard run --suite quick` first")
        return
    print(_render(store, "text", references))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _show(args: argparse.Namespace) -> int:
    store = _open_store(args.results)
    try:
        _print_board(store, not args.no_reference)
    finally:
        store.close()
    return 0


def _export(args: argparse.Namespace) -> int:
    store = _open_store(args.results)
    try:
        text = _render(store, args.format, not args.no_reference)
    finally:
        store.close()
    if args.output:
        _write(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0


def eval_into_store(args: argparse.Namespace) -> int:
    """``eval --results FILE``: run one job into the results file (resuming it) and print its summary."""
    from agentgym_r1.leaderboard.jobs import Job, Progress, run_jobs
    from agentgym_r1.leaderboard.suites import make_env

    make_env(args.env, args.source).close()  # an unknown env id is a usage error here, not a skipped job
    _open_store(args.results).close()
    job = Job(args.env, args.source, args.policy, args.seed, args.episodes, "eval", args.timeout)
    (outcome,) = run_jobs([job], args.results, workers=1, progress=Progress(every=10) if args.verbose else None)
    rate = outcome.successes / outcome.episodes if outcome.episodes else 0.0
    print(f"{args.env} policy={args.policy} source={args.source or 'default'} episodes={outcome.episodes} "
          f"success {rate:.3f} status={outcome.status}" + (f": {outcome.message}" if outcome.message else ""))
    return 0 if outcome.status == "done" else 1
