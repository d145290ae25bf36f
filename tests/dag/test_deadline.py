from __future__ import annotations

import threading
import time

import pytest

from airflowless.dag.deadline import DeadlineExceeded, deadline
from tests.support.eventually import eventually


def _deadline_timers() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if isinstance(t, threading.Timer) and getattr(t.function, "__module__", None) == deadline.__module__]


def test_deadline_interrupts_python_code() -> None:
    with pytest.raises(DeadlineExceeded), deadline(0.2):
        while True:  # never ends by itself: leaving it at all is the deadline's doing
            sum(range(1000))


def test_deadline_is_not_swallowed_by_except_exception() -> None:
    with pytest.raises(DeadlineExceeded), deadline(0.1):
        try:
            while True:  # the deadline passes in here, in a C call (the workload), whatever the machine's speed
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - what a careless stage does
            pass
        pytest.fail("the deadline was swallowed by `except Exception`")


def test_no_deadline_and_a_met_deadline_change_nothing() -> None:
    with deadline(None):
        value = 1
    with deadline(0.1):
        value += 1
    # wait until its timer is gone (cancelled or fired): an exception it raised in this thread would surface here
    eventually(lambda: not _deadline_timers(), message=lambda: f"deadline timers still alive: {_deadline_timers()}")
    assert value == 2
