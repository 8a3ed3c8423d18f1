"""Where the rollout engine's envs live: in this process (threads), in worker processes, or in Ray actors.

``env_backend="thread"`` (default) keeps the envs in this process and steps them from ``env_workers`` threads (one
after another with 0 or 1). Cheap, but envs that hold the GIL (ALFWorld's TextWorld engine) gain nothing, and
ALFWorld's envs share one lock (:data:`agentgym_r1.envs.alfworld.env.TEXTWORLD_LOCK`). ``"process"`` keeps them in
``env_workers`` spawned worker processes (a :class:`~agentgym_r1.core.workers.ProcessWorker` each, so an env stays
in the process that made it); ``"ray"`` in as many Ray actors (extra ``ray``), on the cluster at ``ray_address``, the
one this process is connected to, or a local instance.

Every env has a *slot*; a reset puts it on the least busy worker. A round's calls go out as one batch per worker and
come back in the order they were given. An env that raises answers an error for its own call only. A worker that
dies answers an error for every env it held (the engine ends those episodes with ``env_error``) and a new worker
takes its place. Envs made by id are kept in their worker for the next episode with the same id and kwargs.

Every call (reset, step, release, close) has a time limit, ``timeout`` (``RolloutConfig.env_timeout``, default
:data:`DEFAULT_ENV_TIMEOUT` s): a reply not back by then is an error for its env, so a hung reset or tool ends its
episode with ``env_error`` instead of the rollout. A worker process or Ray actor past the limit is killed and replaced
(its other envs are lost, as when it dies); a thread cannot be stopped, so the thread backend abandons the call's
thread and drops its env (closed at release, which ends a call that waits on what the env holds, e.g. a tool's
process), and refuses new calls while :data:`MAX_HUNG_THREADS` abandoned calls still run.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym

from agentgym_r1.core.workers import ProcessWorker, ThreadLanes, call_started
from agentgym_r1.error import ConfigError, EnvBackendError, WorkerDied, WorkerTimeout, require

EnvBackendName = Literal["thread", "process", "ray"]
ENV_BACKENDS: tuple[str, ...] = ("thread", "process", "ray")
DEFAULT_ENV_TIMEOUT = 120.0  # seconds per env call; ALFWorld's slowest reset is well under a second
ACTOR_STARTUP_TIMEOUT = 120.0  # seconds for a new Ray actor to come up (not counted in any env call's limit)
MAX_HUNG_THREADS = 16  # abandoned env calls still running, past which the thread backend starts no more


@dataclass(frozen=True, slots=True)
class EnvCall:
    """A reset (``action`` None: make or reuse an env for ``env`` and ``kwargs`` in ``slot``) or a step."""

    slot: int
    action: str | None = None
    env: str | Callable[[], gym.Env] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    options: dict[str, Any] | None = None


@dataclass(slots=True)
class EnvReply:
    """What a reset or step gave. ``messages`` is the env's transcript in chat form when it keeps one; ``error`` is
    set (and nothing else) when the env raised or its worker died."""

    obs: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    task_id: str | None = None
    error: str | None = None


class EnvHost:
    """The envs of one worker (this process for threads, a worker process, a Ray actor), by slot."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[gym.Env, Any]] = {}
        self.idle: dict[Any, list[gym.Env]] = {}
        self.started: float | None = None  # when the call that runs now started (time.monotonic()), else None

    def run(self, calls: Sequence[EnvCall]) -> list[EnvReply]:
        """The replies in order; in a worker process each call has the whole time limit (:func:`call_started`)."""
        replies = []
        for c in calls:
            call_started()
            self.started = time.monotonic()
            replies.append(self.call(c))
        self.started = None
        return replies

    def running_for(self) -> float:
        """Seconds the current call of :meth:`run` has been running (0 when none), asked by a Ray driver while
        it waits (on the actor's clock: the driver may be on another machine)."""
        started = self.started
        return 0.0 if started is None else time.monotonic() - started

    def call(self, c: EnvCall) -> EnvReply:
        if c.action is not None:
            return self._step(c)
        try:
            env = self._acquire(c)
            obs, _ = env.reset(seed=c.seed, options=c.options)
            task = getattr(env.unwrapped, "task", None)
            return EnvReply(obs, messages=_transcript(env), task_id=getattr(task, "id", None))
        except Exception as e:  # an env that raises ends its own episode
            return EnvReply(error=f"reset raised {type(e).__name__}: {e}")

    def _step(self, c: EnvCall) -> EnvReply:
        entry = self.live.get(c.slot)
        if entry is None:
            return EnvReply(error=f"no env in slot {c.slot} (it was released or its worker restarted)")
        try:
            obs, reward, terminated, truncated, info = entry[0].step(c.action)
        except Exception as e:
            return EnvReply(error=f"step raised {type(e).__name__}: {e}")
        return EnvReply(obs, float(reward), bool(terminated), bool(truncated), info, _transcript(entry[0]))

    def _acquire(self, c: EnvCall) -> gym.Env:
        assert c.env is not None
        if not isinstance(c.env, str):
            env, key = c.env(), None
        else:
            key = (c.env, repr(sorted(c.kwargs.items())))
            try:
                env = self.idle.get(key, []).pop()
            except IndexError:  # none idle (pop, not a test first: threads share the pool)
                env = gym.make(c.env, **c.kwargs)
        self.live[c.slot] = (env, key)
        return env

    def release(self, slots: Sequence[int]) -> None:
        """Envs made by id go back to the idle pool; envs from a factory are closed."""
        for slot in slots:
            env, key = self.live.pop(slot, (None, None))
            if env is None:
                continue
            if key is None:
                env.close()
            else:
                self.idle.setdefault(key, []).append(env)

    def discard(self, slots: Sequence[int]) -> None:
        """Close the envs in ``slots`` without pooling them (their call hung: they may be in any state)."""
        for slot in slots:
            env, _ = self.live.pop(slot, (None, None))
            if env is not None:
                with contextlib.suppress(Exception):
                    env.close()

    def close(self) -> None:
        for env in [e for e, _ in list(self.live.values())] + [e for envs in self.idle.values() for e in envs]:
            env.close()
        self.live.clear()
        self.idle.clear()

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """The Ray node this worker runs on (its node id) when it is a Ray actor, else this machine's host name."""
        import sys

        ray = sys.modules.get("ray")  # imported in a Ray actor; never imported here for the other backends
        if ray is not None and ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
        return socket.gethostname()


def _transcript(env: gym.Env) -> list[dict[str, Any]] | None:
    transcript = getattr(env.unwrapped, "transcript", None)
    if transcript is not None and hasattr(transcript, "messages"):
        messages = [dict(m) for m in transcript.messages()]
        if messages and getattr(getattr(env.unwrapped, "parser", None), "lists_tools", False):
            messages[0]["tools"] = env.unwrapped.tool_schemas()  # the chat template lists them (parser="auto")
        return messages
    return None


class ThreadBackend:
    """Envs in this process, stepped by ``workers`` daemon threads (one with 0 or 1), each call waited for at most
    ``timeout`` seconds."""

    name = "thread"

    def __init__(self, workers: int = 0, timeout: float = DEFAULT_ENV_TIMEOUT) -> None:
        self.workers, self.timeout = workers, timeout
        self.host = EnvHost()
        self.lanes = ThreadLanes(self.host.call, workers, timeout, "agentgym-env-worker")
        self.hung: list[threading.Thread] = []  # abandoned calls' threads
        self.dropped: set[int] = set()  # their slots: the envs are closed at release, never pooled

    def check(self, env: str | Callable[[], gym.Env], kwargs: Mapping[str, Any] | None = None) -> None:
        """Any factory and any options work in this process."""

    def run(self, calls: Sequence[EnvCall]) -> list[EnvReply]:
        self.hung = [t for t in self.hung if t.is_alive()]
        if len(self.hung) >= MAX_HUNG_THREADS:
            return [
                EnvReply(
                    error=f"{len(self.hung)} env calls that passed env_timeout={self.timeout:g} s are "
                    "still running in threads, so no more are started; use env_backend='process', "
                    "whose hung workers are killed"
                )
                for _ in calls
            ]
        replies = []
        for c, (reply, thread) in zip(calls, self.lanes.run(calls), strict=True):
            if thread is not None:
                self.hung.append(thread)
                self.dropped.add(c.slot)
                reply = EnvReply(
                    error=f"env {'reset' if c.action is None else 'step'} did not answer within "
                    f"{self.timeout:g} s (env_timeout); its env was dropped and its thread "
                    "abandoned (a thread cannot be stopped; env_backend='process' kills the worker)"
                )
            replies.append(reply)
        return replies

    def release(self, slots: Sequence[int]) -> None:
        hung = [s for s in slots if s in self.dropped]
        self.dropped.difference_update(hung)
        self._bounded(self.host.release, [s for s in slots if s not in hung])
        self._bounded(self.host.discard, hung)

    def _bounded(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` (envs' ``close``) in a daemon thread for at most the time limit, then abandoned; what it
        raises is raised here."""
        box: dict[str, BaseException] = {}

        def target() -> None:
            try:
                fn(*args)
            except Exception as e:
                box["error"] = e

        thread = threading.Thread(target=target, name="agentgym-env-close", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if thread.is_alive():
            self.hung.append(thread)
        elif "error" in box:
            raise box["error"]

    def close(self) -> None:
        """Close every env, then give abandoned calls (which closing their envs may have ended) a moment to end."""
        self._bounded(self.host.close)
        self.lanes.close()
        deadline = time.monotonic() + min(self.timeout, 2.0)
        for thread in self.hung:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.hung = [t for t in self.hung if t.is_alive()]
        self.dropped.clear()


class WorkerPool:
    """Envs in ``workers`` remote :class:`EnvHost`\\ s; subclasses say how a worker is started, called and stopped.
    Each reply is waited for at most ``timeout`` seconds; a worker past it is killed and replaced."""

    name = "pool"

    def __init__(self, workers: int, timeout: float = DEFAULT_ENV_TIMEOUT) -> None:
        self.size, self.timeout = max(1, workers), timeout
        self.workers = [self._spawn() for _ in range(self.size)]
        self.where: dict[int, int] = {}  # slot -> worker
        self.lost: dict[int, str] = {}  # slots whose worker died, with the reason

    # -- what a subclass provides -------------------------------------------------------------------------------------
    def _spawn(self) -> Any:
        raise NotImplementedError

    def _submit(self, worker: Any, method: str, *args: Any) -> Any:
        """Start ``method(*args)`` on the worker's :class:`EnvHost`."""
        raise NotImplementedError

    def _result(self, pending: Any) -> Any:
        """What the call gave, each env call in it within ``self.timeout`` (:class:`WorkerTimeout` past it)."""
        raise NotImplementedError

    def _died(self, error: BaseException) -> bool:
        raise NotImplementedError

    def _stop(self, worker: Any) -> None:
        raise NotImplementedError

    # -- the backend ------------------------------------------------------------------------------------------------
    def check(self, env: str | Callable[[], gym.Env], kwargs: Mapping[str, Any] | None = None) -> None:
        """A factory and the env's options must reach the workers: a :class:`ConfigError` before any work when they
        cannot be pickled."""
        what, value = ("factory", env) if not isinstance(env, str) else ("env_kwargs", dict(kwargs or {}))
        try:
            pickle.dumps(value)
        except Exception as e:
            raise ConfigError(
                f"env_backend={self.name!r} sends envs' {what} to worker processes, and {value!r} "
                f"cannot be pickled ({type(e).__name__}: {e}); use functions and objects defined at "
                f"module level, or env_backend='thread'"
            ) from e

    def run(self, calls: Sequence[EnvCall]) -> list[EnvReply]:
        if not self.workers:  # closed: a later rollout starts new workers, as a closed thread backend makes new envs
            self.workers = [self._spawn() for _ in range(self.size)]
        replies: list[EnvReply | None] = [None] * len(calls)
        batches: dict[int, list[int]] = {}
        for i, c in enumerate(calls):
            if c.action is None:
                self.where[c.slot] = self._least_busy()
            worker = self.where.get(c.slot)
            if worker is None:
                replies[i] = EnvReply(error=self.lost.pop(c.slot, f"no env in slot {c.slot}"))
                continue
            batches.setdefault(worker, []).append(i)
        pending = {w: self._send(w, "run", [calls[i] for i in idx]) for w, idx in batches.items()}
        for w, idx in batches.items():
            try:
                out = self._receive(pending[w])
            except Exception as e:  # past the time limit, or dead: the worker is replaced and its envs are lost
                out = [EnvReply(error=self._failed(w, e)) for _ in idx]
            for i, reply in zip(idx, out, strict=True):
                replies[i] = reply
        return [r if r is not None else EnvReply(error="no reply") for r in replies]

    def _send(self, w: int, method: str, *args: Any) -> Any:
        """The pending call, or the exception when the worker refused it (a dead process refuses at once)."""
        try:
            return self._submit(self.workers[w], method, *args)
        except Exception as e:
            return e

    def _receive(self, pending: Any) -> Any:
        if isinstance(pending, BaseException):
            raise pending
        return self._result(pending)

    def _least_busy(self) -> int:
        load = [0] * self.size
        for w in self.where.values():
            load[w] += 1
        return load.index(min(load))

    def _failed(self, w: int, error: BaseException) -> str:
        """The error for the calls that were on worker ``w``; a dead or hung worker is replaced and its envs lost."""
        if not self._died(error):
            return f"env worker {w} could not answer: {type(error).__name__}: {error}"
        if isinstance(error, WorkerTimeout):
            message = (
                f"env worker {w} did not answer a call within {self.timeout:g} s (env_timeout); it was killed "
                "and a new worker took its place"
            )
        else:
            message = f"env worker {w} died ({type(error).__name__}: {error}); a new worker took its place"
        for slot in [s for s, where in self.where.items() if where == w]:
            del self.where[slot]
            self.lost[slot] = message
        self._stop(self.workers[w])
        self.workers[w] = self._spawn()
        return message

    def release(self, slots: Sequence[int]) -> None:
        by_worker: dict[int, list[int]] = {}
        for slot in slots:
            self.lost.pop(slot, None)
            if slot in self.where:
                by_worker.setdefault(self.where.pop(slot), []).append(slot)
        pending = {w: self._send(w, "release", s) for w, s in by_worker.items()}
        for w, p in pending.items():
            try:
                self._receive(p)
            except Exception as e:  # a worker that died took its envs with it
                self._failed(w, e)

    def close(self) -> None:
        pending = [self._send(w, "close") for w in range(len(self.workers))]
        for p in pending:
            with contextlib.suppress(Exception):  # a dead or hung worker has nothing to close: it is stopped below
                self._receive(p)
        for worker in self.workers:
            self._stop(worker)
        self.workers, self.where, self.lost = [], {}, {}

    def pids(self) -> list[int]:
        """The process id of each worker, in order."""
        return [self._receive(self._send(w, "pid")) for w in range(len(self.workers))]

    def nodes(self) -> list[str]:
        """The node of each worker, in order (:meth:`EnvHost.node`)."""
        return [self._receive(self._send(w, "node")) for w in range(len(self.workers))]


# -- worker processes ---------------------------------------------------------------------------------------------
_HOST: EnvHost | None = None


def _start_host() -> None:
    """In a new worker process: its :class:`EnvHost`."""
    global _HOST
    _HOST = EnvHost()


def _host_call(method: str, *args: Any) -> Any:
    assert _HOST is not None
    return getattr(_HOST, method)(*args)


class ProcessBackend(WorkerPool):
    """Envs in ``workers`` spawned processes (a :class:`ProcessWorker` each, so every env stays in one process).

    A round's calls go to a worker as one request; it marks the start of each call in shared memory, so each call is
    waited for at most ``timeout`` seconds. A worker past it is killed (SIGKILL); one that dies (killed, out of
    memory) closes its pipe, and the wait ends at once. Any failure replaces the worker (its pipe is out of step).
    """

    name = "process"

    def _spawn(self) -> ProcessWorker:
        worker = ProcessWorker(_start_host, name="agentgym env worker")
        worker.start()  # the workers start side by side; the first call waits until its own is up
        return worker

    def _submit(self, worker: ProcessWorker, method: str, *args: Any) -> Any:
        worker.request(_host_call, method, *args)
        return worker

    def _result(self, pending: ProcessWorker) -> Any:
        return pending.reply(self.timeout)[1]

    def _died(self, error: BaseException) -> bool:
        return isinstance(error, WorkerTimeout | WorkerDied)  # anything else is the call's own error, sent back

    def _stop(self, worker: ProcessWorker) -> None:
        worker.kill()


# -- Ray actors ---------------------------------------------------------------------------------------------------
class RayBackend(WorkerPool):
    """Envs in ``workers`` Ray actors (one CPU each) on the cluster at ``address``, the one this process is connected
    to, or a new local instance.

    The actors import this package as the cluster's nodes have it: on this machine Ray puts the driver's current
    directory on its workers' ``sys.path`` (``ray/_private/worker.py``, ``connect``: ``_py_driver_sys_path``); on
    other nodes install ``agentgym-r1`` or ship it with a ``runtime_env``. A killed actor answers
    ``ray.exceptions.RayActorError`` (``max_restarts=0``: Ray does not restart it; this pool starts a new one). A
    round is one actor call per worker; when it has not answered within the limit, the driver asks the actor (which
    takes two calls at once, ``max_concurrency=2``) how long its current env call has run, and kills it past the
    limit, else waits for the rest of it.
    """

    name = "ray"

    def __init__(self, workers: int, address: str | None = None, timeout: float = DEFAULT_ENV_TIMEOUT) -> None:
        self.ray = require("ray", "ray", "env_backend='ray'")
        connect_ray(self.ray, address)
        # SPREAD: the actors go to every node of the cluster (Ray's default, its hybrid policy, keeps them on the
        # driver's node until about half its CPUs are taken), so a node lost takes only its share of the episodes
        self.actor = self.ray.remote(num_cpus=1, max_restarts=0, max_concurrency=2, scheduling_strategy="SPREAD")(
            EnvHost
        )
        self.booting: dict[int, Any] = {}  # id(actor) -> its first call, answered once the actor is up
        super().__init__(workers, timeout)

    def _spawn(self) -> Any:
        actor = self.actor.remote()
        self.booting[id(actor)] = actor.pid.remote()
        return actor

    def _submit(self, worker: Any, method: str, *args: Any) -> Any:
        boot = self.booting.pop(id(worker), None)
        if boot is not None:  # an actor's start (a new worker process, this package imported) is in no call's limit
            try:
                self.ray.get(boot, timeout=ACTOR_STARTUP_TIMEOUT)
            except self.ray.exceptions.GetTimeoutError as e:
                raise WorkerDied(
                    f"a Ray actor did not start within {ACTOR_STARTUP_TIMEOUT:g} s (are there CPUs "
                    "free for one more actor?)"
                ) from e
        return worker, getattr(worker, method).remote(*args), method == "run"

    def _result(self, pending: tuple[Any, Any, bool]) -> Any:
        """A round's reply, its env calls timed one by one; any other call's within the limit."""
        worker, ref, timed_per_call = pending
        wait = self.timeout
        while True:
            try:
                return self.ray.get(ref, timeout=wait)
            except self.ray.exceptions.GetTimeoutError:
                if not timed_per_call:
                    raise WorkerTimeout(f"a Ray actor did not answer within {self.timeout:g} s") from None
            try:
                wait = self.timeout - self.ray.get(worker.running_for.remote(), timeout=self.timeout)
            except self.ray.exceptions.GetTimeoutError:
                wait = 0.0
            if wait <= 0:
                raise WorkerTimeout(f"a Ray actor's env call did not answer within {self.timeout:g} s")

    def _died(self, error: BaseException) -> bool:
        return isinstance(error, self.ray.exceptions.RayActorError | WorkerTimeout | WorkerDied)

    def _stop(self, worker: Any) -> None:
        self.booting.pop(id(worker), None)
        self.ray.kill(worker, no_restart=True)


def connect_ray(ray: Any, address: str | None) -> None:
    """Join the Ray cluster at ``address`` (``host:port``, ``ray://host:port`` or ``auto``), or start a local one
    when ``address`` is None; nothing when this process is connected already. :class:`EnvBackendError` with the fix
    when the address cannot be reached (checked with one TCP connection first: Ray itself retries for a minute)."""
    if ray.is_initialized():
        return
    check_ray_address(address)
    try:
        ray.init(address=address, include_dashboard=False, logging_level="WARNING")
    except ray.exceptions.AuthenticationError as e:  # Ray 2.60: a cluster under RAY_AUTH_MODE=token, no token here
        raise EnvBackendError(
            f"cannot connect to Ray at {address or 'a new local instance'!r}: the cluster uses token "
            f"authentication and this process has no token ({e.message.split('.')[0]}); set RAY_AUTH_TOKEN "
            "(or RAY_AUTH_TOKEN_PATH) to the cluster's token (`ray get-auth-token` on its head node)"
        ) from e
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise EnvBackendError(
            f"cannot connect to Ray at {address or 'a new local instance'!r}: {type(e).__name__}: {e}"
        ) from e


def check_ray_address(address: str | None) -> None:
    """:class:`EnvBackendError` with the fix when ``address`` (``host:port`` or ``ray://host:port``) takes no TCP
    connection; None, ``auto`` and ``local`` pass."""
    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except (OSError, ValueError) as e:
        raise EnvBackendError(
            f"Ray address {address!r} cannot be reached ({type(e).__name__}: {e}); start a "
            "cluster there (`ray start --head`), give its address as host:port or "
            "ray://host:port, or leave ray_address unset for a local Ray instance"
        ) from e


def check_env_backend(
    name: str, workers: int = 0, ray_address: str | None = None, timeout: float = DEFAULT_ENV_TIMEOUT
) -> None:
    """The errors :func:`make_env_backend` would raise, without starting anything: an unknown name, a negative
    worker count, a time limit that is not a finite number of seconds > 0, a missing ``ray`` extra, a Ray address
    that cannot be reached."""
    if name not in ENV_BACKENDS:
        raise ConfigError(f"unknown env_backend {name!r}; choose one of {list(ENV_BACKENDS)}")
    if workers < 0:
        raise ConfigError(f"env_workers must be >= 0, got {workers}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
        raise ConfigError(
            f"env_timeout must be a finite number of seconds > 0, got {timeout!r}; every env call "
            f"needs a limit (default {DEFAULT_ENV_TIMEOUT:g}), so give a larger number for slow envs"
        )
    if name == "ray":
        require("ray", "ray", "env_backend='ray'")
        check_ray_address(ray_address)


def make_env_backend(
    name: str, workers: int = 0, ray_address: str | None = None, timeout: float = DEFAULT_ENV_TIMEOUT
) -> ThreadBackend | ProcessBackend | RayBackend:
    """The env backend called ``name``, each env call limited to ``timeout`` seconds; a named error before any work
    for an unknown name, a bad limit or an unreachable Ray."""
    check_env_backend(name, workers, None, timeout)  # the address is checked when Ray connects
    if name == "thread":
        return ThreadBackend(workers, timeout)
    if name == "process":
        return ProcessBackend(workers, timeout)
    return RayBackend(workers, ray_address, timeout)
