"""Trying again: the one retry helper of the package, built on ``tenacity``.

Every loop that tries an operation again (the results store's writes to a database another process holds, the
retriever client's requests) goes through :func:`retry_call`: the operation is a plain function called afresh on each
attempt, so a failed attempt can be retried (a ``@contextmanager`` that yields inside a loop cannot: ``contextlib``
throws the block's exception into the generator, which may not yield again, and raises ``RuntimeError: generator
didn't stop after throw()``). No heavy imports: the leaderboard and retrieval layers both use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import tenacity

__all__ = ["retry_call"]

T = TypeVar("T")


def retry_call(
    fn: Callable[[], T],
    *,
    retry_if: Callable[[BaseException], bool],
    attempts: int | None = None,
    within: float | None = None,
    first_wait: float = 0.1,
    max_wait: float = 2.0,
) -> T:
    """``fn()``, called again while it raises an exception that ``retry_if`` accepts, waiting ``first_wait`` seconds
    and twice as long each time after (at most ``max_wait``, plus up to ``first_wait`` of random jitter, so processes
    that wait for one another do not wake together).

    It stops after ``attempts`` calls, or before a wait that would end more than ``within`` seconds after the first
    call started (``tenacity.stop_before_delay``: ``seconds_since_start + upcoming_sleep >= within``), whichever
    comes first; at least one of the two must be given. When it stops, the last exception is raised as it was
    (``reraise=True``: tenacity's ``RetryError.reraise`` raises the last attempt's own exception); an exception that
    ``retry_if`` refuses is raised at once.
    """
    if attempts is None and within is None:
        raise ValueError("retry_call needs attempts= or within= (a retry without a bound never gives up)")
    if attempts is not None and attempts < 1:
        raise ValueError(f"retry_call attempts must be at least 1, got {attempts}")
    if within is not None and not (math.isfinite(within) and within >= 0):
        raise ValueError(f"retry_call within must be a finite number of seconds >= 0, got {within}")
    stops = [
        *([tenacity.stop_after_attempt(attempts)] if attempts is not None else []),
        *([tenacity.stop_before_delay(within)] if within is not None else []),
    ]
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(retry_if),
        stop=tenacity.stop_any(*stops),
        wait=tenacity.wait_exponential(multiplier=first_wait, max=max_wait) + tenacity.wait_random(0, first_wait),
        reraise=True,
    )
    return retrying(fn)
