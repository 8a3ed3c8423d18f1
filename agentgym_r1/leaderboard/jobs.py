"""Evaluation jobs (one policy on one env) run into the results store, resumably, in parallel across envs.

Each finished episode is stored at once (see :mod:`agentgym_r1.leaderboard.store`); running the same jobs again
skips what is stored. Envs run in separate processes (no state is shared between them); jobs of one env run one
after another in its process. Bad input stops only the job it concerns: an env id that is not registered, or whose
extra is not installed, is recorded as skipped; a policy that cannot be built or an endpoint that cannot be reached
is recorded as failed with the message; a model turn that times out ends that episode unsolved. The other jobs go on.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TextIO

from agentgym_r1.error import AgentGymError, DependencyNotInstalled, PolicyError
from agentgym_r1.leaderboard.policies import make_policy, policy_kind
from agentgym_r1.leaderboard.runner import run_episode
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta
from agentgym_r1.leaderboard.suites import is_registered, make_env, not_registered_message

MAX_FAILURES_IN_A_ROW = 3


@dataclass(frozen=True)
class Job:
    env_id: str
    source: str | None
    policy: str
    seed: int = 0
    episodes: int = 20
    suite: str = ""
    timeout: float = 60.0


@dataclass
class JobOutcome:
    job: Job
    status: str
    message: str | None
    episodes: int
    successes: int


class Progress:
    """Progress lines on a stream (stderr by default): episodes done, the live success rate, the elapsed time."""

    def __init__(self, stream: TextIO | None = None, every: int = 0) -> None:
        self.stream, self.every = stream, every

    def __call__(self, job: Job, done: int, successes: int, note: str | None = None) -> None:
        if note is None and self.every and done % self.every and done != job.episodes:
            return
        width = 20
        filled = round(width * done / max(1, job.episodes))
        rate = successes / done if done else 0.0
        line = (f"[{job.env_id} {job.policy}] {'#' * filled}{'.' * (width - filled)} {done}/{job.episodes} "
                f"success {rate:.2f}" + (f"  {note}" if note else ""))
        stream = self.stream or sys.stderr
        stream.write(line + "\n")
        stream.flush()


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the checkout this package runs from, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _meta(job: Job) -> RunMeta:
    from agentgym_r1 import __version__

    return RunMeta(job.env_id, job.source or "default", job.policy, job.seed, job.episodes, job.suite,
                   policy_kind(job.policy, job.env_id), package_version=__version__, git_commit=git_commit())


def run_job(job: Job, store: ResultsStore, progress: Callable[..., None] | None = None) -> JobOutcome:
    """Run ``job``'s missing episodes into ``store``; never raises for bad input (see the module docstring)."""
    meta = _meta(job)
    if not is_registered(job.env_id):
        return _finish(store, meta, job, "skipped", not_registered_message(job.env_id), progress)
    try:
        env = make_env(job.env_id, job.source)
    except DependencyNotInstalled as e:  # an extra this checkout lacks: like an env that is not here
        return _finish(store, meta, job, "skipped", f"{job.env_id} needs an extra: {e}", progress)
    except Exception as e:  # an env that cannot be built is this job's failure, not the suite's
        return _finish(store, meta, job, "failed", f"cannot make {job.env_id} on source {job.source!r}: {e}", progress)
    try:
        return _play(job, meta, env, store, progress)
    finally:
        env.close()


def _play(job: Job, meta: RunMeta, env, store: ResultsStore, progress) -> JobOutcome:
    try:
        policy = make_policy(job.policy, job.env_id, seed=job.seed, timeout=job.timeout)
    except AgentGymError as e:
        return _finish(store, meta, job, "failed", str(e), progress)
    try:
        return _episodes(job, meta, env, policy, store, progress)
    finally:
        policy.close()


def _episodes(job: Job, meta: RunMeta, env, policy, store: ResultsStore, progress) -> JobOutcome:
    run_id = store.begin_run(meta)
    stored = store.episodes(run_id)
    done, successes = len(stored), sum(e.success for e in stored)
    failures = 0
    for idx in sorted(set(range(job.episodes)) - {e.idx for e in stored}):
        t0 = time.perf_counter()
        try:
            rec = run_episode(env, policy, seed=job.seed + idx, idx=idx)
        except PolicyError as e:  # the policy cannot act at all (endpoint down): stop this job, keep the rest
            return _finish(store, meta, job, "failed", str(e), progress, done, successes)
        except Exception as e:  # a bug in an env or a baseline: recorded, the run goes on
            rec = EpisodeRecord(idx, job.seed + idx, None, False, 0.0, 0, 0, error=f"{type(e).__name__}: {e}")
        rec.seconds = time.perf_counter() - t0
        store.add_episode(meta, run_id, rec)
        done, successes = done + 1, successes + rec.success
        failures = failures + 1 if rec.error else 0
        if progress:
            progress(job, done, successes, rec.error)
        if failures >= MAX_FAILURES_IN_A_ROW:
            return _finish(store, meta, job, "failed", f"{failures} episodes in a row failed; last: {rec.error}",
                           progress, done, successes)
    return _finish(store, meta, job, "done", None, progress, done, successes)


def _finish(store: ResultsStore, meta: RunMeta, job: Job, status: str, message: str | None,
            progress: Callable[..., None] | None, done: int = 0, successes: int = 0) -> JobOutcome:
    store.finish_run(meta, status, message)
    if progress and status != "done":
        progress(job, done, successes, f"{status.upper()}: {message}")
    return JobOutcome(job, status, message, done, successes)


def exit_with_parent(parent_pid: int, every: float = 0.5) -> threading.Thread:
    """In a worker process: a daemon thread that ends the process when ``parent_pid`` is gone (the main process
    was killed, even with SIGKILL, which runs no cleanup): the worker is re-parented, so ``os.getppid()`` changes.
    Whatever episodes the worker finished are already stored; the one it was playing is played again on resume."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(every)
        os._exit(1)

    thread = threading.Thread(target=watch, name="agentgym-exit-with-parent", daemon=True)
    thread.start()
    return thread


def _run_group(jobs: Sequence[Job], store_path: str, progress: Callable[..., None] | None,
               parent_pid: int | None = None) -> list[JobOutcome]:
    if parent_pid is not None:
        exit_with_parent(parent_pid)
    store = ResultsStore(store_path)
    try:
        return [run_job(job, store, progress) for job in jobs]
    finally:
        store.close()


def run_jobs(jobs: Sequence[Job], store_path: str | os.PathLike[str], workers: int | None = None,
             progress: Callable[..., None] | None = None) -> list[JobOutcome]:
    """Run ``jobs`` into the store at ``store_path``: one process per env, ``workers`` at a time (default: cores)."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.env_id, []).append(job)
    workers = min(len(groups), workers or os.cpu_count() or 1)
    if any(j.policy.startswith("hf:") for j in jobs):
        workers = 1  # one local model in memory at a time
    if workers <= 1:
        return [o for g in groups.values() for o in _run_group(g, str(store_path), progress)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = [(g, pool.submit(_run_group, g, str(store_path), progress, os.getpid())) for g in groups.values()]
        return [o for g, f in futures for o in _outcomes(g, f)]


def _outcomes(group: list[Job], future) -> list[JobOutcome]:
    try:
        return future.result()
    except Exception as e:  # the worker process died (killed, out of memory): what it stored is kept
        return [JobOutcome(job, "failed", f"worker process died: {type(e).__name__}: {e}", 0, 0) for job in group]
