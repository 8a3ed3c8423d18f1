"""Evaluation jobs (one policy on one env) run into the results store, resumably, in parallel across envs.

Each finished episode is stored at once (see :mod:`agentgym_r1.leaderboard.store`); running the same jobs again
skips what is stored. Envs run in separate processes (no state is shared between them); jobs of one env run one
after another in its process. Bad input stops only the job it concerns: an env id that is not registered, or whose
extra is not installed, is recorded as skipped; a policy that cannot be built is recorded as failed with the message;
an episode whose model turn times out, or whose endpoint is down or answers garbage, is stored as failed with the
reason, and a job stops (failed) after ``MAX_FAILURES_IN_A_ROW`` such episodes in a row. The other jobs go on.

Baselines play one episode at a time; model policies many at once (:mod:`agentgym_r1.leaderboard.batched`). A job
with ``samples`` K > 1 plays each task (reset seed) K times, for pass@k on the board.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO

from agentgym_r1.error import AgentGymError, DependencyNotInstalled, PolicyError, UnknownOptionError
from agentgym_r1.leaderboard.batched import EnginePlayer, is_engine_spec, play_concurrent
from agentgym_r1.leaderboard.models import make_policy
from agentgym_r1.leaderboard.policies import policy_kind
from agentgym_r1.leaderboard.runner import run_episode
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta
from agentgym_r1.leaderboard.suites import (
    env_kwargs,
    is_registered,
    make_env,
    not_registered_message,
    options_label,
)

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
    samples: int = 1  # plays of each task (pass@k); episode i plays task i // samples
    concurrency: int = 16  # model episodes in flight (openai:) or per engine batch (hf:, vllm:)
    env_backend: str = "thread"  # where the rollout engine's envs run (hf:, vllm:): thread, process or ray
    env_workers: int = 0
    ray_address: str | None = None
    env_kwargs: str = ""  # the env's options beyond the source, as canonical JSON (see :func:`canonical`)

    @property
    def options(self) -> dict[str, Any]:
        return json.loads(self.env_kwargs) if self.env_kwargs else {}

    def items(self) -> list[tuple[int, int]]:
        """Every episode of the job as (index, reset seed): the ``samples`` plays of a task share its seed."""
        return [(i, self.seed + i // self.samples) for i in range(self.episodes * self.samples)]


def canonical(env_kwargs: dict[str, Any] | None) -> str:
    """Env options as the canonical JSON a job and the store keep ("" for none)."""
    return json.dumps(env_kwargs, sort_keys=True, separators=(",", ":")) if env_kwargs else ""


@dataclass
class JobOutcome:
    job: Job
    status: str
    message: str | None
    episodes: int
    successes: int


class Progress:
    """A ``tqdm`` bar per job on stderr: episodes done, the live success rate and the ETA. The bars are quiet when
    stderr is not a terminal (``disable=None``); a job's end other than done (failed, skipped) is always written."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.bars: dict[tuple[str, str, int, int], Any] = {}

    def __call__(self, job: Job, done: int, successes: int, note: str | None = None) -> None:
        from tqdm import tqdm

        stream = self.stream or sys.stderr
        key = (job.env_id, job.policy, job.seed, job.samples, job.env_kwargs)
        total = job.episodes * job.samples
        bar = self.bars.get(key)
        label = " ".join(filter(None, (job.env_id, options_label(job.env_kwargs), job.policy)))
        if bar is None:
            bar = self.bars[key] = tqdm(
                total=total,
                initial=max(0, done - 1),
                desc=label,
                file=stream,
                disable=None,
                dynamic_ncols=True,
                unit="ep",
                leave=True,
            )
        bar.update(done - bar.n)
        bar.set_postfix(success=f"{successes / done:.2f}" if done else "-", refresh=False)
        if note and note.split(":")[0] in ("FAILED", "SKIPPED"):
            bar.close()
            tqdm.write(f"[{label}] {done}/{total} success {successes / done if done else 0.0:.2f}  {note}", file=stream)
        elif done >= total:
            bar.close()


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the checkout this package runs from, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def job_meta(job: Job) -> RunMeta:
    """The store's record of ``job`` (its key says which stored run it resumes)."""
    from agentgym_r1 import __version__

    return RunMeta(
        job.env_id,
        job.source or "default",
        job.policy,
        job.seed,
        job.episodes * job.samples,
        job.suite,
        policy_kind(job.policy, job.env_id),
        package_version=__version__,
        git_commit=git_commit(),
        samples=job.samples,
        env_kwargs=job.env_kwargs,
    )


def run_job(job: Job, store: ResultsStore, progress: Callable[..., None] | None = None) -> JobOutcome:
    """Run ``job``'s missing episodes into ``store``; never raises for bad input (see the module docstring)."""
    meta = job_meta(job)
    if not is_registered(job.env_id):
        return _finish(store, meta, job, "skipped", not_registered_message(job.env_id), progress)
    if is_engine_spec(job.policy):
        return _play_engine(job, meta, store, progress)
    try:
        env = make_env(job.env_id, job.source, job.options)
    except DependencyNotInstalled as e:  # an extra this checkout lacks: like an env that is not here
        return _finish(store, meta, job, "skipped", f"{job.env_id} needs an extra: {e}", progress)
    except UnknownOptionError as e:
        if not job.env_kwargs:
            raise
        # --env-kwargs for a whole suite: an env that does not take an option is left out, saying which
        return _finish(
            store, meta, job, "skipped", f"{job.env_id} does not take --env-kwargs {job.env_kwargs}: {e}", progress
        )
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
    if job.policy.startswith("openai:"):  # episodes in flight at once, each with its own env and policy
        policy.close()
        return _play_concurrent(job, meta, env, store, progress)
    try:
        return _episodes(job, meta, store, progress, lambda todo: _sequential(env, policy, todo))
    finally:
        policy.close()


def _sequential(env, policy, todo: list[tuple[int, int]]) -> Iterator[EpisodeRecord]:
    for idx, seed in todo:
        t0 = time.perf_counter()
        try:
            rec = run_episode(env, policy, seed=seed, idx=idx)
        except PolicyError as e:  # the policy cannot act: this episode fails with the reason
            rec = EpisodeRecord(idx, seed, None, False, 0.0, 0, 0, error=str(e))
        except Exception as e:  # a bug in an env or a baseline: recorded, the run goes on
            rec = EpisodeRecord(idx, seed, None, False, 0.0, 0, 0, error=f"{type(e).__name__}: {e}")
        rec.seconds = time.perf_counter() - t0
        yield rec


def _play_concurrent(job: Job, meta: RunMeta, env, store: ResultsStore, progress) -> JobOutcome:
    from agentgym_r1.leaderboard.models import make_client, parse_openai_spec

    client = make_client(parse_openai_spec(job.policy)[0], job.timeout)
    try:
        return _episodes(
            job,
            meta,
            store,
            progress,
            lambda todo: play_concurrent(
                lambda: make_env(job.env_id, job.source, job.options),
                lambda: make_policy(job.policy, job.env_id, seed=job.seed, timeout=job.timeout, client=client),
                todo,
                job.concurrency,
            ),
        )
    finally:
        client.close()


def _play_engine(job: Job, meta: RunMeta, store: ResultsStore, progress) -> JobOutcome:
    try:
        player = EnginePlayer(
            job.policy,
            timeout=job.timeout,
            env_backend=job.env_backend,
            env_workers=job.env_workers,
            ray_address=job.ray_address,
        )
    except DependencyNotInstalled as e:
        return _finish(store, meta, job, "failed", f"{job.policy} needs an extra: {e}", progress)
    except AgentGymError as e:
        return _finish(store, meta, job, "failed", str(e), progress)
    try:
        kwargs = env_kwargs(job.env_id, job.source, job.options)
        return _episodes(
            job, meta, store, progress, lambda todo: player.play(job.env_id, kwargs, todo, job.concurrency)
        )
    finally:
        player.close()


def _episodes(
    job: Job,
    meta: RunMeta,
    store: ResultsStore,
    progress,
    play: Callable[[list[tuple[int, int]]], Iterator[EpisodeRecord]],
) -> JobOutcome:
    """Store each episode ``play`` yields as it comes; a job whose episodes fail ``MAX_FAILURES_IN_A_ROW`` times in a
    row (an endpoint that is down) stops as failed, with every failed episode recorded with its reason."""
    run_id = store.begin_run(meta)
    stored = store.episodes(run_id)
    done, successes = len(stored), sum(e.success for e in stored)
    failures, stored_idx = 0, {e.idx for e in stored}
    episodes = play([item for item in job.items() if item[0] not in stored_idx])
    try:
        for rec in episodes:
            store.add_episode(meta, run_id, rec)
            done, successes = done + 1, successes + rec.success
            failures = failures + 1 if rec.error else 0
            if progress:
                progress(job, done, successes, rec.error)
            if failures >= MAX_FAILURES_IN_A_ROW:
                return _finish(
                    store,
                    meta,
                    job,
                    "failed",
                    f"{failures} episodes in a row failed; last: {rec.error}",
                    progress,
                    done,
                    successes,
                )
    finally:
        close = getattr(episodes, "close", None)
        if close:
            close()
    return _finish(store, meta, job, "done", None, progress, done, successes)


def _finish(
    store: ResultsStore,
    meta: RunMeta,
    job: Job,
    status: str,
    message: str | None,
    progress: Callable[..., None] | None,
    done: int = 0,
    successes: int = 0,
) -> JobOutcome:
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


def _run_group(
    jobs: Sequence[Job], store_path: str, progress: Callable[..., None] | None, parent_pid: int | None = None
) -> list[JobOutcome]:
    if parent_pid is not None:
        exit_with_parent(parent_pid)
    store = ResultsStore(store_path)
    try:
        return [run_job(job, store, progress) for job in jobs]
    finally:
        store.close()


def run_jobs(
    jobs: Sequence[Job],
    store_path: str | os.PathLike[str],
    workers: int | None = None,
    progress: Callable[..., None] | None = None,
) -> list[JobOutcome]:
    """Run ``jobs`` into the store at ``store_path``: one process per env, ``workers`` at a time (default: cores)."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.env_id, []).append(job)
    workers = min(len(groups), workers or os.cpu_count() or 1)
    if any(j.policy.startswith(("hf:", "vllm:")) for j in jobs):
        workers = 1  # one local model in memory at a time
    if workers <= 1:
        return [o for g in groups.values() for o in _run_group(g, str(store_path), progress)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = [(g, pool.submit(_run_group, g, str(store_path), progress, os.getpid())) for g in groups.values()]
        return [o for g, f in futures for o in _outcomes(g, f)]


def _outcomes(group: list[Job], future) -> list[JobOutcome]:
    try:
        return future.result()
    except BrokenProcessPool as e:  # the worker process died (killed, out of memory): what it stored is kept
        message = f"worker process died: {type(e).__name__}: {e}"
    except (
        Exception
    ) as e:  # an error the worker let out (a results file locked past its retries): what it stored is kept
        message = f"{type(e).__name__}: {e}"
    return [JobOutcome(job, "failed", message, 0, 0) for job in group]
