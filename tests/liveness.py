"""What a test counts to show that no worker outlives its owner: this process's child processes and threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from multiprocessing import resource_tracker

import psutil


def children() -> set[int]:
    """The pids of this process's children, at any depth. multiprocessing's resource tracker (one per process,
    started by the first spawned process and kept until exit) is started first, so it is in every baseline."""
    resource_tracker.ensure_running()
    return {p.pid for p in psutil.Process().children(recursive=True)}


def new_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t not in before and t.is_alive()}


def wait_until(condition: Callable[[], bool], seconds: float = 15.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass (processes and threads end a moment after a kill)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()
