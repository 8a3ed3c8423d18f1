"""``agentgym-r1 leaderboard run|show|export`` and ``eval --results``: the command-line side of the leaderboard.

Output (the board, progress lines, recovery notices) is written here, never inside the library modules.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_RESULTS = "runs/leaderboard.sqlite"
SEED_MAX = 2**32 - 1  # what every seeding API takes (numpy's legacy RandomState, random.seed); SQLite's INTEGER too
MAX_EPISODES = 100_000  # episodes x samples of one job: every index is planned up front


def int_arg(low: int, high: int, what: str | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``low`` to ``high``. Anything else is argparse's usage error, naming the
    flag (``argument --seed: must be at most 4294967295, got 10**20``), exit status 2, before any work. With ``what``
    every refusal names the kind and the range (``argument --port: must be a port number from 0 to 65535``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not an integer (or more digits than int() reads)
            value = None
        if value is None or (what is not None and not low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be {what or 'an integer'} from {low} to {high}, got {text[:40]!r}")
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {text[:40]}")
        return value

    return parse


port_arg = int_arg(0, 65535, "a port number")  # 0: any free port


def seconds_arg(text: str) -> float:
    """An argparse ``type``: a finite number of seconds above 0 (``inf`` and ``nan`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text[:40]!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text[:40]}")
    return value


def add_leaderboard_parser(sub: Any) -> None:
    lb = sub.add_parser("leaderboard", help="run the evaluation suite and show or export the board")
    lsub = lb.add_subparsers(dest="leaderboard_command", required=True)
    run = lsub.add_parser("run", help="evaluate the suite's baselines (and --policy models) on every env")
    run.add_argument("--suite", default="quick", help="quick (minutes) or full")
    run.add_argument(
        "--policy",
        action="append",
        default=[],
        help="a policy to add on every env (hf:PATH, vllm:PATH, openai:URL#MODEL or a baseline name); repeatable",
    )
    run.add_argument("--only", action="store_true", help="run only the --policy policies, not the suite's baselines")
    run.add_argument("--env", action="append", default=[], help="run only these env ids (repeatable)")
    run.add_argument(
        "--episodes", type=int_arg(1, MAX_EPISODES), default=None, help="episodes per env (default: the suite's)"
    )
    run.add_argument("--seed", type=int_arg(0, SEED_MAX), default=0)
    run.add_argument("--workers", type=int_arg(1, 1024), default=None, help="envs run in parallel (default: CPU cores)")
    add_play_options(run)
    run.add_argument("--html", default=None, help="where to write the HTML board (default: beside the results)")
    run.add_argument(
        "--no-train",
        action="store_true",
        help="skip the tiny agent the quick suite trains in the run (SFT, then GRPO on GSM8K)",
    )
    run.add_argument(
        "--sft-steps",
        type=int_arg(1, 10**6),
        default=None,
        help="the trained agent's SFT steps (default: TrainBudget.sft_steps)",
    )
    run.add_argument(
        "--train-steps",
        type=int_arg(1, 10**6),
        default=None,
        help="the trained agent's GRPO steps (default: TrainBudget.grpo_steps)",
    )
    run.add_argument(
        "--train-dir",
        default=None,
        help="where the trained agent's checkpoints go (default: beside the results, <results>-train/)",
    )
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


def add_play_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``eval`` and ``leaderboard run``."""
    p.add_argument(
        "--timeout", type=seconds_arg, default=60.0, help="seconds a model may take for one turn (one request)"
    )
    p.add_argument(
        "--samples", type=int_arg(1, 1000), default=1, help="plays of each task; K > 1 adds pass@1 and pass@K"
    )
    p.add_argument(
        "--concurrency",
        type=int_arg(1, 4096),
        default=None,
        help="model episodes at once: openai: requests in flight, hf:/vllm: episodes per engine batch (default 16; "
        "the trained agent's rows: 64)",
    )
    from agentgym_r1.adapters.env_backends import ENV_BACKENDS

    p.add_argument(
        "--env-backend",
        default="thread",
        choices=ENV_BACKENDS,
        help="where hf:/vllm: episodes' envs run: threads here, worker processes, or Ray actors",
    )
    p.add_argument(
        "--env-workers", type=int_arg(0, 1024), default=0, help="threads, processes or Ray actors for the envs"
    )
    p.add_argument("--ray-address", default=None, help="Ray cluster for --env-backend ray (default: a local instance)")
    p.add_argument(
        "--env-kwargs",
        default=None,
        metavar="JSON",
        help='the env\'s options as a JSON object, e.g. \'{"difficulty": "hard"}\'; recorded with the '
        "results and shown on the board (leaderboard run: given to every env of the suite, over the "
        "suite's own; an env that does not take an option is skipped, saying so)",
    )


def check_play_options(args: argparse.Namespace, env_ids: list[str]) -> None:
    """Refuse bad numbers and bad model specs before any work starts."""
    from agentgym_r1.error import ConfigError
    from agentgym_r1.leaderboard.batched import check_spec

    for name in ("episodes", "samples", "concurrency"):  # the flags' types check these too; a Namespace made in code
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ConfigError(f"--{name} must be at least 1, got {value}")
    if getattr(args, "episodes", None) and args.episodes * args.samples > MAX_EPISODES:
        raise ConfigError(
            f"--episodes x --samples must be at most {MAX_EPISODES} plays, got {args.episodes} x "
            f"{args.samples}; run fewer episodes, or split the run by --seed"
        )
    if not (0 <= args.seed <= SEED_MAX):
        raise ConfigError(f"--seed must be from 0 to {SEED_MAX}, got {args.seed}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ConfigError(f"--timeout must be a finite number of seconds above 0, got {args.timeout}")
    from agentgym_r1.adapters.env_backends import check_env_backend

    check_env_backend(args.env_backend, args.env_workers, args.ray_address)
    if isinstance(args.policy, str):  # eval: one policy on one env
        check_spec(args.policy, env_ids[0])
        return
    for spec in args.policy:  # the board: a baseline name missing on one env is that job's failure, not the run's
        if spec.startswith(("hf:", "vllm:", "openai:")):
            check_spec(spec, env_ids[0])


def _open_store(path: str):
    from agentgym_r1.leaderboard.store import ResultsStore

    store = ResultsStore(path)
    if store.recovery:
        print(f"agentgym-r1: warning: {store.recovery}", file=sys.stderr)
    return store


def _plan(args: argparse.Namespace, budget: Any = None) -> tuple[list, list]:
    """The run's evaluation jobs, and the agents it trains (:class:`~agentgym_r1.leaderboard.training.TrainPlan`):
    none with ``--no-train``, ``--only``, ``--env-kwargs`` (the agent trains on its own options) or ``--samples``."""
    from agentgym_r1.error import ConfigError
    from agentgym_r1.leaderboard.jobs import Job, canonical
    from agentgym_r1.leaderboard.suites import parse_env_kwargs, suite

    entries = suite(args.suite)
    missing = sorted(set(args.env) - {e.env_id for e in entries})
    if missing:
        raise ConfigError(
            f"{missing} not in suite {args.suite!r}; its envs are {[e.env_id for e in entries]} "
            f"(evaluate any other env id with `agentgym-r1 eval`)"
        )
    check_play_options(args, [e.env_id for e in entries])
    extra = parse_env_kwargs(args.env_kwargs)
    train = not (args.no_train or args.only or extra or args.samples != 1)
    jobs, plans = [], []
    for entry in entries:
        if (args.env and entry.env_id not in args.env) or (entry.train and not train):
            continue
        if entry.train:
            plans.append(_train_plan(args, entry, budget))
        options = canonical({**dict(entry.env_kwargs), **extra})
        policies = [*([] if args.only else entry.policies), *args.policy]
        for policy in dict.fromkeys(policies):
            jobs.append(
                Job(
                    entry.env_id,
                    entry.source,
                    policy,
                    args.seed,
                    args.episodes or entry.episodes,
                    args.suite,
                    args.timeout,
                    args.samples,
                    args.concurrency or Job.concurrency,
                    env_backend=args.env_backend,
                    env_workers=args.env_workers,
                    ray_address=args.ray_address,
                    env_kwargs=options,
                )
            )
    return list(dict.fromkeys(jobs)), plans  # --env-kwargs over a suite's levels can make two entries one


def _train_plan(args: argparse.Namespace, entry: Any, budget: Any) -> Any:
    import dataclasses

    from agentgym_r1.leaderboard.training import TrainBudget, TrainPlan

    budget = budget or TrainBudget()
    steps = {k: v for k, v in (("sft_steps", args.sft_steps), ("grpo_steps", args.train_steps)) if v is not None}
    budget = dataclasses.replace(budget, **steps)  # a step count under 1 is refused here, before any work
    out = Path(args.train_dir) if args.train_dir else Path(args.results).with_name(Path(args.results).stem + "-train")
    return TrainPlan(
        args.results,
        out,
        args.episodes or entry.episodes,
        args.seed,
        args.suite,
        args.concurrency or TrainPlan.concurrency,
        args.timeout,
        budget,
    )


def _run(args: argparse.Namespace) -> int:
    return run_board(args)


def run_board(args: argparse.Namespace, train_budget: Any = None, train_callbacks: Any = ()) -> int:
    """``leaderboard run``: the suite's jobs, then the agents it trains (``train_budget`` replaces the default
    :class:`~agentgym_r1.leaderboard.training.TrainBudget`; ``train_callbacks`` go to the GRPO trainer), then the
    board. A training that fails or is interrupted (Ctrl-C) leaves the board with the rows that finished, saying
    which training row is missing and why; the exit status is then 1 (130 after Ctrl-C)."""
    from agentgym_r1.leaderboard.jobs import Progress, run_jobs

    jobs, plans = _plan(args, train_budget)  # bad options are refused before any file is touched
    _open_store(args.results).close()  # recovers a damaged file before any worker opens it
    outcomes = run_jobs(jobs, args.results, workers=args.workers, progress=Progress())
    trained, interrupted = _train(plans, train_callbacks)
    store = _open_store(args.results)
    try:
        _print_board(store, not args.no_reference)
        html_path = Path(args.html or Path(args.results).with_suffix(".html"))
        _write(html_path, _render(store, "html", not args.no_reference))
    finally:
        store.close()
    skipped = [o for o in outcomes if o.status == "skipped"]
    failed = [o for o in outcomes if o.status == "failed"]
    print(
        f"\n{len(outcomes) - len(skipped) - len(failed)} job(s) done, {len(skipped)} skipped, {len(failed)} failed; "
        f"results in {args.results}; HTML board in {html_path}"
    )
    for o in failed:
        print(f"agentgym-r1: failed: {o.job.env_id} {o.job.policy}: {o.message}", file=sys.stderr)
    missing = [r for r in trained if r.status not in ("done", "skipped")]
    for r in trained:
        if r.status != "done":
            print(f"agentgym-r1: {r.status}: the trained agent on {r.env_id}: {r.message}", file=sys.stderr)
    return 130 if interrupted else 1 if failed or missing else 0


def _train(plans: list, callbacks: Any) -> tuple[list, bool]:
    """Train each plan's agent; on Ctrl-C stop training (what finished is stored) and say so."""
    from agentgym_r1.leaderboard.jobs import Progress
    from agentgym_r1.leaderboard.training import train_on_board

    if plans:  # transformers' bars for every checkpoint written and loaded: our own lines say where training is
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:  # no train extra: the training is skipped, saying so
            pass
        else:
            hf_logging.disable_progress_bar()
    done = []
    for plan in plans:
        try:
            done.append(
                train_on_board(
                    plan, callbacks, say=lambda line: print(line, file=sys.stderr, flush=True), progress=Progress()
                )
            )
        except KeyboardInterrupt:
            print("agentgym-r1: training interrupted (Ctrl-C); the board shows the rows that finished", file=sys.stderr)
            return done, True
    return done, False


def _render(store, fmt: str, references: bool) -> str:
    from agentgym_r1.leaderboard import render
    from agentgym_r1.leaderboard.board import board

    boards = board(store, references)
    return {"md": render.markdown, "csv": render.to_csv, "html": render.to_html, "text": render.terminal}[fmt](
        boards, store.trainings()
    )


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


def run_eval(args: argparse.Namespace) -> int:
    """``eval``: one job run into a results store (``--results FILE``, else a new temporary one whose path is
    printed, to resume with), then the same figures as the board for it."""
    import json
    import tempfile

    from agentgym_r1.leaderboard.board import Row, fill
    from agentgym_r1.leaderboard.jobs import Job, Progress, canonical, run_jobs
    from agentgym_r1.leaderboard.runner import summarise
    from agentgym_r1.leaderboard.suites import make_env, options_label, parse_env_kwargs

    extra = parse_env_kwargs(args.env_kwargs)
    make_env(args.env, args.source, extra).close()  # an unknown env id or option is a usage error here
    check_play_options(args, [args.env])
    results = args.results or str(Path(tempfile.mkdtemp(prefix="agentgym-r1-eval-")) / "eval.sqlite")
    _open_store(results).close()
    job = Job(
        args.env,
        args.source,
        args.policy,
        args.seed,
        args.episodes,
        "eval",
        args.timeout,
        args.samples,
        args.concurrency or Job.concurrency,
        env_backend=args.env_backend,
        env_workers=args.env_workers,
        ray_address=args.ray_address,
        env_kwargs=canonical(extra),
    )
    (outcome,) = run_jobs([job], results, workers=1, progress=Progress())
    store = _open_store(results)
    try:
        (run,) = [r for r in store.runs() if r["key"] == _run_key(job)]
        episodes = store.episodes(run["id"])
    finally:
        store.close()
    from agentgym_r1.leaderboard.policies import policy_kind

    row = fill(
        Row(
            args.env,
            run["source"],
            args.policy,
            policy_kind(args.policy, args.env),
            status=outcome.status,
            message=outcome.message,
            planned=run["episodes"],
            options=options_label(job.env_kwargs),
        ),
        episodes,
    )
    _print_eval(args, row, episodes)
    print(f"results in {results} (run the same command with --results {results} to resume)")
    if args.json:
        print(json.dumps(summarise(episodes)))
    return 0 if outcome.status == "done" else 1


def _run_key(job) -> str:
    from agentgym_r1.leaderboard.jobs import job_meta

    return job_meta(job).key


def _print_eval(args: argparse.Namespace, row, episodes: list) -> None:
    from agentgym_r1.leaderboard import render
    from agentgym_r1.leaderboard.board import wilson

    if args.verbose:
        for e in episodes:
            print(
                f"episode {e.idx:4d} task={e.task_id} success={e.success} reward={e.reward:.2f} turns={e.turns}"
                + (f" error={e.error}" if e.error else "")
            )
    rate = wilson(sum(e.success for e in episodes), len(episodes))
    print(
        f"{args.env} policy={args.policy} source={args.source or 'default'}"
        + (f" {row.options}" if row.options else "")
        + f" episodes={row.episodes} "
        f"success {rate.value:.3f} (95% CI {rate.low:.3f}-{rate.high:.3f}) status={row.status}"
        + (f": {row.message}" if row.message else "")
    )
    print(render.terminal({args.env: [row]}))
