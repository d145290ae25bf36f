"""Dynamic fan-out: ``stage.map(...)`` over a list known only when the run gets there, on the embedded cluster."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from airflowless import Skip, pipeline, stage
from airflowless.errors import ConfigError, PipelineDefinitionError, PipelineRunError

pytestmark = pytest.mark.usefixtures("cluster_client")


@stage
def list_days(folder: str, days: str) -> list[str]:
    return [day for day in days.split(",") if day]


def _the_day(day: str, folder: str, scale: int) -> tuple[str, int]:
    """An item's key: its day's file (the folder also holds the runs this test counts)."""
    return os.path.join(folder, "days", f"{day}.txt"), scale


@stage(retries=1, retry_delay=0.01, cache_key=_the_day)
def score(day: str, folder: str, scale: int) -> int:
    runs = Path(folder, "runs", day)
    runs.parent.mkdir(exist_ok=True)
    with runs.open("a") as counted:
        counted.write("x")
    text = Path(folder, "days", f"{day}.txt").read_text()
    if text == "skip":
        raise Skip(f"{day} has no rows")
    if text == "bad":
        raise ValueError(f"{day} is broken")
    return len(text) * scale


@stage
def total(scores: list[int | None]) -> dict[str, object]:
    return {"scores": scores, "sum": sum(s for s in scores if s is not None)}


@pipeline
def nightly(folder: str, days: str, scale: int = 1):
    return total(score.map(list_days(folder, days), folder, scale=scale))


def _days(folder: Path, **texts: str) -> None:
    (folder / "days").mkdir(exist_ok=True)
    for day, text in texts.items():
        (folder / "days" / f"{day}.txt").write_text(text)


def _runs(folder: Path) -> dict[str, int]:
    return {path.name: len(path.read_text()) for path in (folder / "runs").glob("*")}


def test_a_stage_maps_over_a_list_made_at_run_time_each_item_a_recorded_stage_run(store, tmp_path: Path) -> None:  # noqa: ANN001
    _days(tmp_path, d1="a", d2="bb", d3="ccc")
    result = nightly.run({"folder": str(tmp_path), "days": "d1,d2,d3", "scale": 10}, store=store)
    assert result.value == {"scores": [10, 20, 30], "sum": 60}
    stages = {s.node: s for s in result.record.stages}
    assert [stages[f"score[{i}]"].status for i in range(3)] == ["succeeded"] * 3
    assert stages["score"].status == "succeeded"
    assert stages["score"].output_summary == "3 items: 3 succeeded"
    assert stages["score"].upstream == ["list_days", "score[0]", "score[1]", "score[2]"]  # what it maps over, its items
    assert result.output("score") == [10, 20, 30]
    from airflowless.dag.result import stage_rows

    assert [row[0] for row in stage_rows(result.record)] == [  # as `runs show` lists them
        "list_days", "score", "score[0]", "score[1]", "score[2]", "total"]

    _days(tmp_path, d4="dddd")  # a new day: the three it had are reused from the cache, one item runs
    again = nightly.run({"folder": str(tmp_path), "days": "d1,d2,d3,d4", "scale": 10}, store=store)
    assert again.value["scores"] == [10, 20, 30, 40]
    assert _runs(tmp_path) == {"d1": 1, "d2": 1, "d3": 1, "d4": 1}
    assert {s.node: s.status for s in again.record.stages}["score[0]"] == "cached"


def test_a_failed_item_fails_the_mapped_stage_and_resume_runs_only_that_item(store, tmp_path: Path) -> None:  # noqa: ANN001
    _days(tmp_path, d1="a", d2="bad", d3="ccc")
    with pytest.raises(PipelineRunError, match=r"score\[1\]") as failed:
        nightly.run({"folder": str(tmp_path), "days": "d1,d2,d3"}, store=store)
    record = store.get_run(failed.value.run_id)
    status = {s.node: s.status for s in record.stages}
    assert status == {"list_days": "succeeded", "score[0]": "succeeded", "score[1]": "failed",
                      "score[2]": "succeeded", "score": "failed", "total": "skipped"}
    assert "1 of 3 items failed (first: score[1])" in (record.stage("score").error or "")
    assert record.stage("score[1]").attempts == 2, "each item retries on its own"

    _days(tmp_path, d2="bb")  # fixed
    resumed = nightly.resume(record.id, store=store)
    assert resumed.value == {"scores": [1, 2, 3], "sum": 6}
    assert _runs(tmp_path) == {"d1": 1, "d2": 3, "d3": 1}, "only the failed item ran again"


def test_an_empty_list_gives_an_empty_list_and_skipped_items_read_as_none(store, tmp_path: Path) -> None:  # noqa: ANN001
    (tmp_path / "days").mkdir()
    assert nightly.run({"folder": str(tmp_path), "days": ""}, store=store).value == {"scores": [], "sum": 0}
    _days(tmp_path, d1="a", d2="skip")
    result = nightly.run({"folder": str(tmp_path), "days": "d1,d2"}, store=store, cache=False)
    assert result.value == {"scores": [1, None], "sum": 1}
    assert result.record.stage("score[1]").status == "skipped"
    assert result.record.stage("score").output_summary == "2 items: 1 succeeded, 1 skipped"


@stage(concurrency=1, cache=False)
def timed(index: int, folder: str) -> tuple[float, float]:
    began = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of this machine
    time.sleep(0.3)
    return began, time.monotonic()


@pipeline
def one_at_a_time(folder: str):
    return timed.map([0, 1, 2], folder)


def test_concurrency_bounds_how_many_items_run_at_once(store, tmp_path: Path) -> None:  # noqa: ANN001
    spans = sorted(one_at_a_time.run({"folder": str(tmp_path)}, store=store).value)
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), spans


@stage
def not_a_list() -> int:
    return 7


@pipeline
def maps_a_number():
    return score.map(not_a_list(), "x", scale=1)


def test_mapping_over_what_is_not_a_list_or_too_many_items_is_a_clear_error(store) -> None:  # noqa: ANN001
    with pytest.raises(PipelineRunError) as failed:
        maps_a_number.run({}, store=store)
    error = store.get_run(failed.value.run_id).stage("score").error or ""
    assert "score.map(...) maps over a list, but the output of stage 'not_a_list' is a int (7)" in error

    wide = stage(max_width=2)(lambda item: item)

    @pipeline
    def too_wide():
        return wide.map([1, 2, 3])

    with pytest.raises(PipelineDefinitionError, match="got 3 items, more than its max_width of 2"):
        too_wide.graph()

    @pipeline
    def maps_a_string():
        return wide.map("abc")

    with pytest.raises(PipelineDefinitionError, match="maps over a list, or the output of a stage"):
        maps_a_string.graph()

    @pipeline
    def wrong_arguments():
        return score.map(["d1"], "folder", 1, 2)

    with pytest.raises(PipelineDefinitionError, match="with each item first"):
        wrong_arguments.graph()
    with pytest.raises(ConfigError, match="concurrency must be an integer >= 1"):
        stage(concurrency=0)(lambda item: item)


def test_the_score_days_example_scores_only_the_day_that_landed_since_and_releases_its_lock(
        store, tmp_path: Path) -> None:  # noqa: ANN001
    from pipelines.score_days import score_days

    params = {"root": str(tmp_path / "days"), "rows_per_day": 500, "lock": str(tmp_path / "run.lock")}
    first = score_days.run({**params, "days": 2}, store=store)
    assert first.value["summary"]["days"] == 2 and first.value["lock"] == "released"
    second = score_days.run({**params, "days": 3}, store=store)
    assert second.value["summary"] == {**second.value["summary"], "days": 3, "scored": 3}
    status = {s.node: s.status for s in second.record.stages}
    assert [status[f"score_day[{i}]"] for i in range(3)] == ["cached", "cached", "succeeded"]
    assert not (tmp_path / "run.lock").exists()
