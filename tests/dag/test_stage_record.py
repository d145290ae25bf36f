"""A stage's own records go to its run's record, not to the one its worker process was started with."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from airflowless import pipeline, stage
from airflowless.store import open_store


@stage(cache=False)
def where() -> tuple[str, str]:
    """The record open_store() opens in the stage, and in a thread the stage starts."""
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(open_store().url))
    thread.start()
    thread.join()
    return open_store().url, seen[0]


@pipeline
def records():
    return where()


@pytest.mark.usefixtures("home")
def test_a_stage_and_its_threads_open_the_runs_record_on_a_worker_started_with_another(
        cluster_client: Any, tmp_path: Path) -> None:
    from airflowless.settings import get_settings

    run_store = open_store(f"sqlite:///{tmp_path / 'run.db'}")
    workers = cluster_client.run(lambda: get_settings().db_url)
    assert all(url != run_store.url for url in workers.values())  # the workers know another record
    own, threaded = records.run({}, store=run_store).value
    assert own == threaded == run_store.url
    run_store.close()
