"""Workers with a time limit on every call: a process that is killed past it, or threads that are abandoned.

:class:`ProcessWorker` is one spawned process that runs the requests sent to it over a pipe, one at a time. No call
runs past a time limit: the worker writes when each call starts into shared memory (a request of several calls marks
each), and past the limit the process is killed (SIGKILL: a tool stuck in a C loop or an infinite Python loop stops
too); the next request starts a new one. It serves tools with ``isolation="process"``
(:mod:`agentgym_r1.core.tools`) and the rollout engine's process env workers. ``concurrent.futures``'
``ProcessPoolExecutor`` cannot do this: ``Future.cancel`` only cancels a call that has not started
(``concurrent/futures/_base.py``), and a process killed under it breaks the whole pool (``BrokenProcessPool``).

:class:`ThreadLanes` runs calls on long-lived daemon threads and waits for each at most a time limit; a thread past
it is handed back (Python cannot stop a thread), so the caller can drop what it was using and count it.

A worker process ends with its parent: a daemon thread in it exits the process when ``os.getppid()`` changes (the
parent died, even by SIGKILL, and the worker was re-parented), and a ``weakref.finalize`` kills it when its
:class:`ProcessWorker` is collected or the interpreter exits without :meth:`ProcessWorker.close`.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing import get_context
from typing import Any

from agentgym_r1.error import WorkerDied, WorkerTimeout


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


_CLOCK: Any = None  # in a worker process: when its current call started (time.monotonic(), shared with the parent)


def call_started() -> None:
    """In a worker process, the start of a new call for its time limit (a request that runs several calls marks
    each, so that each has the whole limit); nothing elsewhere. ``time.monotonic`` is one clock for every process
    of the machine (CLOCK_MONOTONIC on Linux), so the parent reads it as its own."""
    if _CLOCK is not None:
        _CLOCK.value = time.monotonic()


def _serve(conn: Any, parent_pid: int, clock: Any, setup: Callable[..., Any] | None, args: tuple[Any, ...]) -> None:
    """The worker process: run ``setup(*args)``, say ``("ready", None)``, then answer ``(fn, args)`` requests until
    the pipe closes, with ``("done", value)`` or ``("error", exception)``."""
    global _CLOCK
    _CLOCK = clock
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="agentgym-worker-watch", daemon=True).start()
    failed: BaseException | None = None
    try:
        if setup is not None:
            setup(*args)
    except Exception as e:  # every request is answered with it, so the parent sees why
        failed = e
    conn.send(("ready", None))
    while True:
        try:
            fn, fargs = conn.recv()
        except (EOFError, OSError):
            return
        call_started()
        try:
            if failed is not None:
                raise failed
            conn.send(("done", fn(*fargs)))
        except Exception as e:  # also a reply that cannot be pickled: Connection.send pickles before it writes
            try:
                conn.send(("error", e))
            except Exception:
                conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))


def _kill(process: Any, conn: Any) -> None:
    """The process first: a thread of the parent waiting on the pipe then wakes (the pipe hangs up) and raises."""
    with contextlib.suppress(Exception):
        process.kill()
        process.join(5)
    with contextlib.suppress(Exception):
        conn.close()


class ProcessWorker:
    """One spawned worker process; ``setup(*args)`` runs in it first (both picklable, ``setup`` at module level).

    :meth:`request` sends a call, :meth:`reply` takes its next reply with a time limit; :meth:`call` does both for a
    call with one reply. Past the limit the process is killed and :class:`WorkerTimeout` raised; a process that
    exits raises :class:`WorkerDied`. The process starts on the first request, and again after a kill.
    """

    def __init__(
        self,
        setup: Callable[..., Any] | None = None,
        *args: Any,
        name: str = "agentgym-worker",
        startup_timeout: float = 120.0,
    ) -> None:
        self.setup, self.args, self.name, self.startup_timeout = setup, args, name, startup_timeout
        self.process: Any = None
        self.conn: Any = None
        self.clock: Any = None  # when the worker's current call started (time.monotonic())
        self.finalizer: weakref.finalize | None = None
        self.ready = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        """Launch the process without waiting for it (its start is not counted in any call's limit: the first
        request waits up to ``startup_timeout`` for it)."""
        ctx = get_context("spawn")  # not fork (threads), not forkserver (its server would outlive close)
        parent, child = ctx.Pipe()
        # not daemonic: a daemonic process may not start children (an env worker whose tools run in processes)
        self.clock = ctx.RawValue("d", time.monotonic())
        self.process = ctx.Process(
            target=_serve, args=(child, os.getpid(), self.clock, self.setup, self.args), name=self.name, daemon=False
        )
        self.process.start()
        child.close()
        self.conn, self.ready = parent, False
        self.finalizer = weakref.finalize(self, _kill, self.process, parent)

    def request(self, fn: Callable[..., Any], *args: Any) -> None:
        """Send ``fn(*args)`` (``fn`` at module level) to the worker, starting it when none runs."""
        if self.process is None:
            self.start()
        if not self.ready:
            try:
                self.reply(self.startup_timeout)  # ("ready", None)
            except WorkerTimeout as e:
                raise WorkerDied(f"{self.name} did not start within {self.startup_timeout:g} s") from e
            self.ready = True
        self.clock.value = time.monotonic()  # the limit runs from the send, until the worker marks its own start
        try:
            self.conn.send((fn, args))
        except (OSError, EOFError) as e:  # BrokenPipeError: the process is gone
            raise self._lost(e) from e

    def reply(self, timeout: float | None) -> tuple[str, Any]:
        """The reply ``(kind, value)`` to the last request, while no call in it runs past ``timeout`` seconds (None:
        no limit; a request of several calls gives each the limit, see :func:`call_started`); a call's exception is
        raised here."""
        conn, clock = self.conn, self.clock  # kept: another thread may kill the worker (close it) while this waits
        if conn is None:
            raise WorkerDied(f"{self.name} is not running (it was killed or closed before this reply)")
        while True:
            left = None if timeout is None else max(0.0, clock.value + timeout - time.monotonic())
            try:
                if conn.poll(left):  # True on EOF too: a dead process makes the pipe readable
                    break
            except (OSError, EOFError):
                break
            if left is not None and clock.value + timeout <= time.monotonic():  # else a new call started: wait on
                self.kill()
                raise WorkerTimeout(f"{self.name} did not answer within {timeout:g} s; it was killed")
        try:
            kind, value = conn.recv()
        except (OSError, EOFError) as e:
            raise self._lost(e) from e
        if kind == "error":
            raise value
        return kind, value

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None) -> Any:
        self.request(fn, *args)
        return self.reply(timeout)[1]

    def _lost(self, error: BaseException) -> WorkerDied:
        process = self.process
        self.kill()
        code = process.exitcode if process is not None else None
        return WorkerDied(f"{self.name} exited (exit code {code}) before it answered ({type(error).__name__})")

    def kill(self) -> None:
        """Stop the process now (SIGKILL) and wait for it; the next request starts a new one."""
        if self.finalizer is not None:
            self.finalizer()  # runs _kill once
        self.process = self.conn = self.finalizer = None
        self.ready = False

    def close(self, fn: Callable[..., Any] | None = None, *args: Any, timeout: float = 5.0) -> None:
        """Run ``fn(*args)`` in the worker first when given (its own cleanup, at most ``timeout`` s), then kill it."""
        if fn is not None and self.process is not None:
            with contextlib.suppress(Exception):
                self.call(fn, *args, timeout=timeout)
        self.kill()


class _Lane:
    def __init__(self) -> None:
        self.abandoned = False
        self.thread: threading.Thread | None = None


class ThreadLanes:
    """``fn`` run on items by ``workers`` long-lived daemon threads (lanes) taking calls from one queue, each call
    waited for at most ``timeout`` seconds from its start. A lane past it is *abandoned*: it is handed back (Python
    cannot stop a thread), leaves after its call returns, and a new lane takes its place. :meth:`close` ends the
    lanes that are not abandoned."""

    def __init__(self, fn: Callable[[Any], Any], workers: int, timeout: float, name: str = "agentgym-lane") -> None:
        self.fn, self.size, self.timeout, self.name = fn, max(1, workers), timeout, name
        self.todo: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.lanes: list[_Lane] = []  # the lanes at work
        self.every: list[_Lane] = []  # every lane started on this queue, abandoned ones too

    def _loop(self, lane: _Lane, todo: queue.SimpleQueue[Any]) -> None:
        while not lane.abandoned:
            job = todo.get()
            if job is None:  # close
                return
            i, item, done, started = job
            started[i] = (time.monotonic(), lane)
            try:
                result = self.fn(item)
            except Exception as e:
                result = e
            done.put((i, result))

    def _fill(self) -> None:
        self.lanes = [lane for lane in self.lanes if not lane.abandoned]
        self.every = [lane for lane in self.every if lane.thread is not None and lane.thread.is_alive()]
        while len(self.lanes) < self.size:
            lane = _Lane()
            lane.thread = threading.Thread(target=self._loop, args=(lane, self.todo), name=self.name, daemon=True)
            lane.thread.start()
            self.lanes.append(lane)
            self.every.append(lane)

    def run(self, items: Sequence[Any]) -> list[tuple[Any, threading.Thread | None]]:
        """``(result, None)`` per item in order (an exception ``fn`` raised is the result), or ``(None, thread)`` for
        a call past its limit: its lane's thread, which still runs and is the caller's to count."""
        self._fill()
        done: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        started: dict[int, tuple[float, _Lane]] = {}  # written by the lanes as they take each call
        for job in enumerate(items):
            self.todo.put((*job, done, started))
        out: list[tuple[Any, threading.Thread | None]] = [(None, None)] * len(items)
        waiting = set(range(len(items)))
        while waiting:
            running = [(started[i][0] + self.timeout, i) for i in waiting if i in started]
            try:
                i, result = done.get(timeout=max(0.0, min(running)[0] - time.monotonic()) if running else self.timeout)
            except queue.Empty:
                for deadline, i in running:
                    if deadline <= time.monotonic():
                        lane = started[i][1]
                        lane.abandoned = True
                        out[i] = (None, lane.thread)
                        waiting.discard(i)
                self._fill()
                continue
            if i in waiting:  # a late answer from an abandoned call is dropped
                out[i] = (result, None)
                waiting.discard(i)
        return out

    def close(self, grace: float = 2.0) -> None:
        """End the lanes that are not abandoned (each after the call it runs), waiting up to ``grace`` seconds. A
        lane abandoned just as its call returned may take one of the stops, so there is one per lane ever started
        still alive; the lanes of a later :meth:`run` take calls from a new queue."""
        lanes, self.lanes, every, self.every = self.lanes, [], self.every, []
        todo, self.todo = self.todo, queue.SimpleQueue()
        for _ in every:
            todo.put(None)
        deadline = time.monotonic() + grace
        for lane in lanes:
            if lane.thread is not None:
                lane.thread.join(max(0.0, deadline - time.monotonic()))
