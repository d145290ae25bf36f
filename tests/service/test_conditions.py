"""Run conditions: runs due on the wrong day end skipped; previous-succeeded waits, then skips after a failure;
a manual run goes regardless. On SQLite and PostgreSQL, through the queue the service claims from."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflowless.errors import ConfigError
from airflowless.service.conditions import parse_conditions
from airflowless.store import RunStatus, open_store
from airflowless.store.liveness import this_driver

SATURDAY = datetime(2026, 11, 28, 3, tzinfo=timezone.utc)
MONDAY = datetime(2026, 11, 30, 3, tzinfo=timezone.utc)


@pytest.mark.parametrize(("spec", "says"), [
    ("weekend", "unknown run condition 'weekend'"),
    ("days=mon,funday", "takes days of the week"),
    ("days=", "takes days of the week"),
])
def test_bad_conditions_are_clear_errors(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_conditions([spec])


def test_runs_due_on_a_day_the_condition_excludes_end_skipped_with_the_reason(backend_url: str) -> None:
    store = open_store(backend_url)
    store.register_service(this_driver(), None)
    deployment = store.create_pipeline_deployment("weekdays", pipeline="p", target="/x/p.py:p", params={},
                                                  schedule=None, conditions=parse_conditions(["weekdays"]))
    saturday = store.enqueue_run("p", target="t", params={}, trigger="schedule", deployment_id=deployment,
                                 interval=(SATURDAY - timedelta(days=1), SATURDAY))
    monday = store.enqueue_run("p", target="t", params={}, trigger="schedule", deployment_id=deployment,
                               interval=(MONDAY - timedelta(days=1), MONDAY))
    by_hand = store.enqueue_run("p", target="t", params={}, trigger="manual", deployment_id=deployment)
    claimed = [run.id for run in store.claim_runs(1)]
    assert claimed == [monday, by_hand]  # a run triggered by hand goes regardless
    skipped = store.get_run(saturday)
    assert skipped.status == RunStatus.SKIPPED and skipped.finished_at is not None
    assert skipped.error == "its condition weekdays does not hold: it was due on a Saturday"


def test_previous_succeeded_waits_for_the_previous_run_then_skips_after_a_failure(backend_url: str) -> None:
    store = open_store(backend_url)
    service = store.register_service(this_driver(), None)
    deployment = store.create_pipeline_deployment("chained", pipeline="p", target="/x/p.py:p", params={},
                                                  schedule=None, conditions=parse_conditions(["previous-succeeded"]))

    def queue() -> int:
        return store.enqueue_run("p", target="t", params={}, trigger="files", deployment_id=deployment)

    def end(run_id: int, status: str) -> None:
        store.take_queued_run(run_id, module="m", params={}, driver=this_driver(), address=None)
        store.finish_run(run_id, status)

    first, second = queue(), queue()
    assert [run.id for run in store.claim_runs(service)] == [first]  # no previous run: it goes
    assert store.get_run(second).queue_reason == f"its condition previous-succeeded: waiting for run {first} to end"
    end(first, RunStatus.SUCCEEDED)
    assert [run.id for run in store.claim_runs(service)] == [second]
    end(second, RunStatus.FAILED)
    third = queue()
    assert store.claim_runs(service) == []
    assert store.get_run(third).status == RunStatus.SKIPPED
    assert store.get_run(third).error == f"its condition previous-succeeded does not hold: run {second} failed"
    fourth = queue()  # the skipped run is nobody's previous: still the failed one
    assert store.claim_runs(service) == [] and store.get_run(fourth).status == RunStatus.SKIPPED
    manual = store.enqueue_run("p", target="t", params={}, trigger="manual", deployment_id=deployment)
    assert [run.id for run in store.claim_runs(service)] == [manual]  # by hand, it goes regardless
    end(manual, RunStatus.SUCCEEDED)
    fifth = queue()
    assert [run.id for run in store.claim_runs(service)] == [fifth]
