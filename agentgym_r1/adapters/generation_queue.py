"""A bounded queue of generation requests served by one worker thread, in chunks, so no request holds the others.

The OpenAI-compatible server (:mod:`agentgym_r1.adapters.serve`) puts each request here as a :class:`Job`. One worker
thread owns the backend (generation is compute-bound; one model, one thread) and serves the jobs round-robin: each
turn it generates at most ``chunk_tokens`` new tokens for one job's unfinished rows, then moves on to the next job.
A long request therefore yields every chunk, and a small one that arrives behind it waits for at most one chunk of
each job ahead of it. At most ``max_jobs`` jobs are queued or in progress (:class:`QueueFull` past that), and a job
past its deadline ends with :class:`JobTimeout`.

A chunk continues a row: its context is the prompt plus what the row sampled so far. Stop strings are found by one
:class:`~agentgym_r1.adapters.backends.base.StopScanner` over the row's whole completion, so one that spans two
chunks is found too. Each chunk reseeds the backend from the job's seed and the chunk's number, so a seeded request
gives the same completion however other requests interleave with it. With the transformers backend the first
``cached_jobs`` jobs in progress each keep their own key/value cache
(:class:`~agentgym_r1.adapters.backends.prefix.PrefixCache`, through ``HFBackend.prefix_cache``), so each chunk feeds
only the tokens the last one sampled however jobs interleave; the other jobs prefill their whole context each chunk.
A cache holds up to ``n`` rows of the model's context: ``cached_jobs`` bounds that memory.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

from agentgym_r1.adapters.backends.base import SamplingParams, StopScanner, TokenBackend
from agentgym_r1.adapters.backends.prefix import PrefixCache
from agentgym_r1.adapters.records import FinishReason
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.error import AgentGymError, ConfigError

__all__ = ["GenerationQueue", "Job", "JobTimeout", "QueueFull", "Row"]

log = logging.getLogger("agentgym_r1.serve")


class QueueFull(AgentGymError):
    """The queue already holds ``max_jobs`` requests; the client should retry later."""


class JobTimeout(AgentGymError, TimeoutError):
    """A request that did not finish within the server's time limit per request."""


@dataclass(slots=True)
class Row:
    """One choice of a request: the ids and log-probabilities sampled so far and, once it ended, why."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reason: FinishReason | None = None


@dataclass
class Job:
    """One request: ``n`` rows continuing ``prompt`` for up to ``max_tokens`` tokens each, by ``deadline``
    (``time.monotonic()``). Its ``future`` gets the rows, or the error that ended it; cancelling the future drops it."""

    prompt: list[int]
    n: int
    max_tokens: int
    params: SamplingParams
    deadline: float
    seed: int = field(default_factory=lambda: secrets.randbits(63))
    rows: list[Row] = field(default_factory=list)
    chunks: int = 0
    future: Future = field(default_factory=Future)
    cache: PrefixCache | None = None  # its own key/value cache, when it holds one of the queue's slots

    def __post_init__(self) -> None:
        self.rows = [Row() for _ in range(self.n)]

    @property
    def done(self) -> bool:
        return all(r.reason is not None for r in self.rows)


class GenerationQueue:
    """Serves :class:`Job` s with ``backend`` on one worker thread (started on the first :meth:`submit`)."""

    def __init__(
        self,
        backend: TokenBackend,
        chat: ChatTokenizer,
        *,
        max_jobs: int = 64,
        chunk_tokens: int = 32,
        cached_jobs: int = 4,
    ) -> None:
        if max_jobs < 1:
            raise ConfigError(f"max_jobs must be >= 1, got {max_jobs}")
        if chunk_tokens < 1:
            raise ConfigError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.backend, self.chat = backend, chat
        self.max_jobs, self.chunk_tokens = max_jobs, chunk_tokens
        self.free_caches = cached_jobs if getattr(backend, "reuse_prefix", False) else 0
        self.jobs: collections.deque[Job] = collections.deque()  # waiting for their next chunk
        self.held = 0  # jobs queued or in progress
        self.ready = threading.Condition()
        self.worker: threading.Thread | None = None
        self.stopping = False

    def submit(self, job: Job) -> Future:
        """Queue ``job``; :class:`QueueFull` when ``max_jobs`` are already queued or in progress."""
        with self.ready:
            if self.stopping:
                raise QueueFull("the server is shutting down")
            if self.held >= self.max_jobs:
                raise QueueFull(f"the server already has {self.max_jobs} requests queued or in progress; retry later")
            self.jobs.append(job)
            self.held += 1
            if self.worker is None:
                self.worker = threading.Thread(target=self.run, name="agentgym-r1-generation", daemon=True)
                self.worker.start()
            self.ready.notify()
        return job.future

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the worker after its current chunk; jobs still queued end with :class:`QueueFull`."""
        with self.ready:
            self.stopping = True
            self.ready.notify()
            worker = self.worker
        if worker is not None:
            worker.join(timeout_s)

    def pending(self) -> int:
        with self.ready:
            return self.held

    def run(self) -> None:
        while (job := self.next_job()) is not None:
            self.turn(job)
        with self.ready:
            left, self.jobs = list(self.jobs), collections.deque()
        for job in left:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(QueueFull("the server shut down before this request was served"))

    def next_job(self) -> Job | None:
        with self.ready:
            while not self.jobs and not self.stopping:
                self.ready.wait()
            return None if self.stopping else self.jobs.popleft()

    def turn(self, job: Job) -> None:
        """One chunk of ``job``; requeue it, or settle its future."""
        if job.future.cancelled():  # the client went away
            self.release(job)
            return
        if time.monotonic() > job.deadline:
            self.settle(
                job,
                JobTimeout(
                    f"the request did not finish within the server's time limit "
                    f"({len(job.rows[0].ids)} of max_tokens={job.max_tokens} generated); "
                    f"ask for fewer tokens or retry later"
                ),
            )
            return
        try:
            self.chunk(job)
        except Exception as e:  # a backend failure ends this request, never the worker
            log.exception("generation failed")
            self.settle(job, e)
            return
        if job.done:
            self.settle(job, None)
        else:
            with self.ready:
                self.jobs.append(job)

    def release(self, job: Job) -> None:
        if job.cache is not None:
            job.cache, self.free_caches = None, self.free_caches + 1
        with self.ready:
            self.held -= 1

    def settle(self, job: Job, error: BaseException | None) -> None:
        self.release(job)
        if not job.future.set_running_or_notify_cancel():
            return
        if error is None:
            job.future.set_result(job.rows)
        else:
            job.future.set_exception(error)

    def chunk(self, job: Job) -> None:
        live = [r for r in job.rows if r.reason is None]
        seed = hash((job.seed, job.chunks)) & (2**63 - 1)  # ints hash the same in every process
        job.chunks += 1
        if hasattr(self.backend, "reseed"):
            self.backend.reseed(seed)
        params = dataclasses.replace(job.params, seed=seed)
        budgets = [min(self.chunk_tokens, job.max_tokens - len(r.ids)) for r in live]
        with self.own_cache(job):
            gens = self.backend.generate([job.prompt + r.ids for r in live], budgets, params)
        scanner = StopScanner(self.decode, self.chat.stop_token_ids, job.params.stop)
        for row, gen, budget in zip(live, gens, budgets, strict=True):
            start = len(row.ids)
            row.ids += gen.ids
            row.logprobs += gen.logprobs
            end, reason = self.scan(scanner, row.ids, start)
            if reason is None and gen.finish_reason in ("eos", "stop") and len(gen.ids) < budget:
                reason = gen.finish_reason  # the backend stopped on a rule of its own (vLLM's stop handling)
            if reason is None and end >= job.max_tokens:
                reason = "length"
            del row.ids[end:], row.logprobs[end:]
            row.reason = reason

    @contextlib.contextmanager
    def own_cache(self, job: Job) -> Iterator[None]:
        """Generate with ``job``'s own key/value cache: it gets one of the free slots on its first chunk."""
        if job.cache is None and self.free_caches > 0:
            job.cache, self.free_caches = PrefixCache(), self.free_caches - 1
            job.cache.active = True  # what its session() sets; the cache lives as long as the job
        if job.cache is None:
            yield
            return
        with self.backend.prefix_cache(job.cache):
            yield

    @staticmethod
    def scan(scanner: StopScanner, ids: list[int], start: int) -> tuple[int, FinishReason | None]:
        """Where the completion ``ids`` ends, looking at the tokens from ``start`` on (the earlier ones ended
        nothing)."""
        for n in range(start + 1, len(ids) + 1):
            reason = scanner.check(ids[max(0, n - scanner.window) : n])
            if reason is not None:
                return n, reason
        return len(ids), None

    def decode(self, ids: list[int]) -> str:
        return self.chat.tokenizer.decode(ids, skip_special_tokens=False)
