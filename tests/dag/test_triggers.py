"""Trigger rules and Skip: clean-up stages that run whatever happened upstream, alerts, stages that skip themselves.

Real runs on the embedded cluster; what each stage body saw is written to files (workers are other processes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from airflowless import Skip, pipeline, stage
from airflowless.errors import ConfigError, PipelineDefinitionError, PipelineRunError

pytestmark = pytest.mark.usefixtures("cluster_client")


def _note(folder: str, name: str, value: object) -> None:
    (Path(folder) / f"{name}.json").write_text(json.dumps(value))


def _noted(folder: Path) -> dict[str, object]:
    return {path.stem: json.loads(path.read_text()) for path in folder.glob("*.json")}


@stage(cache=False)
def work(folder: str, fail: bool) -> int:
    if fail:
        raise ValueError("work broke")
    return 21


@stage(trigger="all_done", cache=False)
def release(folder: str, done: int | None) -> str:
    _note(folder, "release", done)
    return "released"


@stage(trigger="one_failed", cache=False)
def alert(folder: str, done: int | None) -> str:
    _note(folder, "alert", done)
    return "alerted"


@stage(cache=False)
def double(value: int) -> int:
    return 2 * value


@stage(cache=False)
def after_release(released: str) -> str:
    return released + " and after"


@pipeline
def guarded(folder: str, fail: bool = False):
    done = work(folder, fail)
    return double(done), after_release(release(folder, done)), alert(folder, done)


def _statuses(store, run_id: int) -> dict[str, tuple[str, str | None]]:  # noqa: ANN001
    return {s.node: (s.status, s.error) for s in store.get_run(run_id).stages}


def test_clean_up_and_alert_stages_run_when_upstream_failed(store, tmp_path: Path) -> None:  # noqa: ANN001
    with pytest.raises(PipelineRunError, match="work") as failed:
        guarded.run({"folder": str(tmp_path), "fail": True}, store=store)
    record = store.get_run(failed.value.run_id)
    assert record.status == "failed", "a clean-up stage running does not hide the failure"
    status = {node: s for node, (s, _) in _statuses(store, record.id).items()}
    assert status == {"work": "failed", "double": "skipped", "release": "succeeded",
                      "after_release": "succeeded", "alert": "succeeded"}
    assert _noted(tmp_path) == {"release": None, "alert": None}, "a failed input reads as None"


def test_when_all_succeeds_the_alert_is_skipped_and_clean_up_gets_the_value(store, tmp_path: Path) -> None:  # noqa: ANN001
    result = guarded.run({"folder": str(tmp_path), "fail": False}, store=store)
    assert result.value == (42, "released and after", None)
    statuses = _statuses(store, result.run_id)
    assert statuses["alert"] == ("skipped", "skipped: no upstream stage failed (trigger one_failed)")
    assert result.record.status == "succeeded"
    assert _noted(tmp_path) == {"release": 21}


@stage(retries=2, retry_delay=0.01, cache=False)
def check(folder: str) -> int:
    count = Path(folder, "checks")
    count.write_text(str(int(count.read_text()) + 1 if count.exists() else 1))
    raise Skip("no new rows today")


@pipeline
def skipping(folder: str):
    found = check(folder)
    return double(found), release(folder, found)


def test_a_stage_that_raises_skip_is_skipped_with_its_reason_and_never_retried(store, tmp_path: Path) -> None:  # noqa: ANN001
    result = skipping.run({"folder": str(tmp_path)}, store=store)
    assert result.record.status == "succeeded", "a skip is not a failure"
    statuses = _statuses(store, result.run_id)
    assert statuses["check"] == ("skipped", "skipped: no new rows today")
    assert statuses["double"] == ("skipped", "skipped: an upstream stage skipped itself")
    assert statuses["release"][0] == "succeeded"
    assert (tmp_path / "checks").read_text() == "1"
    assert _noted(tmp_path) == {"release": None}


def test_bad_trigger_rules_and_skip_outside_a_stage_are_clear_errors_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match="trigger must be one of all_success, all_done, one_failed, got 'always'"):
        stage(trigger="always")(lambda: None)

    @pipeline
    def skips_while_defined():
        raise Skip("nothing to do")

    with pytest.raises(PipelineDefinitionError, match="raise it inside a @stage function"):
        skips_while_defined.graph()


@stage(cache=False)
def slow(folder: str) -> int:
    for _ in range(600):  # 60 s in small sleeps: Python code the run's stop interrupts
        time.sleep(0.1)
    return 1


@stage(cache=False)
def quick() -> int:
    return 2


@pipeline(timeout=2)
def bounded(folder: str):
    late = double(slow(folder))
    return late, quick(), release(folder, late)


def test_a_run_past_its_timeout_is_stopped_its_clean_up_runs_and_it_ends_timed_out(store, tmp_path: Path) -> None:  # noqa: ANN001
    began = time.monotonic()
    with pytest.raises(PipelineRunError, match="timed out after 2 s") as stopped:
        bounded.run({"folder": str(tmp_path)}, store=store)
    assert time.monotonic() - began < 20, "the run did not stop at its timeout"
    record = store.get_run(stopped.value.run_id)
    assert record.status == "timed_out" and "the run timed out after 2 s" in (record.error or "")
    statuses = _statuses(store, record.id)
    assert statuses["slow"] == ("cancelled", "cancelled: the run timed out after 2 s (@pipeline(timeout=...))")
    assert statuses["quick"][0] == "succeeded" and statuses["double"][0] == "skipped"
    assert statuses["release"][0] == "succeeded", "clean-up stages still run"
    assert _noted(tmp_path) == {"release": None}
    with pytest.raises(ConfigError, match="positive number of seconds"):
        pipeline(timeout=0)(lambda: None)
