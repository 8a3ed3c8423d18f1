"""The one retry helper (tenacity underneath): it retries what it is told to, stops where it is told to, and raises
the last error itself."""

from __future__ import annotations

import pytest

from agentgym_r1.core.retry import retry_call


class Flaky:
    def __init__(self, failures: int, error: type[Exception] = OSError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "done"


def test_retries_until_it_works():
    fn = Flaky(2)
    assert retry_call(fn, retry_if=lambda e: isinstance(e, OSError), attempts=5, first_wait=0.0) == "done"
    assert fn.calls == 3


def test_stops_after_attempts_and_raises_the_last_error_itself():
    fn = Flaky(10)
    with pytest.raises(OSError, match="failure 3"):
        retry_call(fn, retry_if=lambda e: isinstance(e, OSError), attempts=3, first_wait=0.0)
    assert fn.calls == 3


def test_an_error_it_is_not_told_to_retry_is_raised_at_once():
    fn = Flaky(1, KeyError)
    with pytest.raises(KeyError):
        retry_call(fn, retry_if=lambda e: isinstance(e, OSError), attempts=5, first_wait=0.0)
    assert fn.calls == 1


def test_within_stops_before_a_wait_past_the_window():
    fn = Flaky(10)
    with pytest.raises(OSError, match="failure 1"):
        retry_call(fn, retry_if=lambda e: True, within=0.05, first_wait=1.0)  # the first wait would pass 0.05 s
    assert fn.calls == 1


@pytest.mark.parametrize("bounds", [{}, {"attempts": 0}, {"within": float("inf")}, {"within": -1}])
def test_a_retry_without_a_finite_bound_is_refused(bounds):
    with pytest.raises(ValueError, match="retry_call"):
        retry_call(Flaky(0), retry_if=lambda e: True, **bounds)
