from __future__ import annotations

import time

import pytest

from airflowless.dag.deadline import DeadlineExceeded, deadline


def test_deadline_interrupts_python_code() -> None:
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded), deadline(0.2):
        while True:
            sum(range(1000))
    assert time.monotonic() - start < 2


def test_deadline_is_not_swallowed_by_except_exception() -> None:
    with pytest.raises(DeadlineExceeded), deadline(0.1):
        try:
            time.sleep(1.0)
        except Exception:  # noqa: BLE001 - what a careless stage does
            pass
        while True:
            time.sleep(0.01)


def test_no_deadline_and_a_met_deadline_change_nothing() -> None:
    with deadline(None):
        value = 1
    with deadline(5.0):
        value += 1
    time.sleep(0.05)
    assert value == 2
