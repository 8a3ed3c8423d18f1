"""Workers with a time limit on every call: a process that is killed past it, or threads that are abandoned.

:class:`ProcessWorker` is one spawned process that runs the calls sent to it over a pipe, one at a time. Each reply is
waited for at most a time limit; past it the process is killed (SIGKILL: a tool stuck in a C loop or an infinite
Python loop stops too), and the next call starts a new one. It serves tools with ``isolation="process"``
(:mod:`agentgym_r1.core.tools`) and the rollout engine's process env workers. ``concurrent.futures``'
``ProcessPoolExecutor`` cannot do this: ``Future.cancel`` only cancels a call that has not started
(``concurrent/futures/_base.py``), and a process killed under it breaks the whole pool (``BrokenProcessPool``).

:func:`run_in_threads` runs calls in daemon threads and waits for each at most a time limit; a thread past it is
handed back (Python cannot stop a thread), so the caller can drop what it was using and count it.

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
import types
import weakref
from collections.abc import Callable, Sequence
from multiprocessing import get_context
from typing import Any

from agentgym_r1.error import WorkerDied, WorkerTimeout


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def _serve(conn: Any, parent_pid: int, setup: Callable[..., Any] | None, args: tuple[Any, ...]) -> None:
    """The worker process: run ``setup(*args)``, say ``("ready", None)``, then answer ``(fn, args)`` requests until
    the pipe closes. A generator's items are sent one by one, then ``("done", None)``; anything else as
    ``("done", value)``; an exception as ``("error", exception)``."""
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
        try:
            if failed is not None:
                raise failed
            out = fn(*fargs)
            if isinstance(out, types.GeneratorType):
                for item in out:
                    conn.send(("item", item))
                out = None
            conn.send(("done", out))
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

    def __init__(self, setup: Callable[..., Any] | None = None, *args: Any, name: str = "agentgym-worker",
                 startup_timeout: float = 120.0) -> None:
        self.setup, self.args, self.name, self.startup_timeout = setup, args, name, startup_timeout
        self.process: Any = None
        self.conn: Any = None
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
        self.process = ctx.Process(target=_serve, args=(child, os.getpid(), self.setup, self.args), name=self.name,
                                   daemon=False)
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
        try:
            self.conn.send((fn, args))
        except (OSError, EOFError) as e:  # BrokenPipeError: the process is gone
            raise self._lost(e) from e

    def reply(self, timeout: float | None) -> tuple[str, Any]:
        """The next ``("item" | "done", value)`` within ``timeout`` seconds (None: no limit); a call's exception is
        raised here."""
        conn = self.conn  # kept: another thread may kill the worker (close it) while this one waits
        if conn is None:
            raise WorkerDied(f"{self.name} is not running (it was killed or closed before this reply)")
        try:
            ready = conn.poll(timeout)  # True on EOF too: a dead process makes the pipe readable
        except (OSError, EOFError):
            ready = True
        if not ready:
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


def run_in_threads(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, timeout: float,
                   name: str = "agentgym-call") -> list[tuple[Any, threading.Thread | None]]:
    """``fn(item)`` for every item, at most ``workers`` at a time, each in a daemon thread waited for at most
    ``timeout`` seconds from its start. Returns ``(result, None)`` per item in order (an exception ``fn`` raised is
    the result), or ``(None, thread)`` for a call past its limit: the thread still runs, and the caller owns it."""
    done: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
    out: list[tuple[Any, threading.Thread | None]] = [(None, None)] * len(items)
    running: dict[int, tuple[float, threading.Thread]] = {}
    waiting = iter(range(len(items)))
    more = True

    def target(i: int) -> None:
        try:
            result = fn(items[i])
        except Exception as e:
            result = e
        done.put((i, result))

    while more or running:
        while more and len(running) < max(1, workers):
            i = next(waiting, None)
            if i is None:
                more = False
                break
            thread = threading.Thread(target=target, args=(i,), name=f"{name}-{i}", daemon=True)
            running[i] = (time.monotonic() + timeout, thread)
            thread.start()
        if not running:
            break
        try:
            i, result = done.get(timeout=max(0.0, min(d for d, _ in running.values()) - time.monotonic()))
        except queue.Empty:
            now = time.monotonic()
            for i in [i for i, (deadline, _) in running.items() if deadline <= now]:
                out[i] = (None, running.pop(i)[1])
            continue
        if i in running:  # a late answer from an abandoned call is dropped
            del running[i]
            out[i] = (result, None)
    return out
