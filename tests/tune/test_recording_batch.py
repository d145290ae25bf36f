"""Trials starting in one loop turn get their records in one transaction (store.add_trials)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflowless.store import open_store
from airflowless.tune.config import TuneConfig
from airflowless.tune.recording import ExperimentRecorder
from airflowless.tune.trial import Trial, TrialStatus


@pytest.mark.timeout(60)
def test_trials_starting_creates_each_record_once_and_keeps_add_trial_semantics(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    recorder = ExperimentRecorder("exp", str(tmp_path), TuneConfig(num_samples=3), {"x": 1})
    recorder.store = open_store(db)
    recorder.create()
    assert recorder.experiment_id is not None
    first = Trial("trial_00000", {"x": 0.5}, TrialStatus.RUNNING)
    first.record_id = recorder.store.add_trial(recorder.experiment_id, first.trial_id, config=first.config)
    trials = [first, Trial("trial_00001", {"x": 0.1}, TrialStatus.RUNNING),
              Trial("trial_00002", {"x": 0.9}, TrialStatus.RUNNING)]

    recorder.trials_starting(trials)
    for trial in trials:
        recorder.trial_started(trial)  # finds its record made: no second row
    recorder.flush()

    rows = {r["name"]: r for r in recorder.store.list_trials(recorder.experiment_id)}
    assert sorted(rows) == ["trial_00000", "trial_00001", "trial_00002"]
    assert [t.record_id for t in trials] == [rows[t.trial_id]["id"] for t in trials]
    # pending until the trial runs on a worker (it may wait for resources), then running
    assert rows["trial_00002"]["config"] == {"x": 0.9} and rows["trial_00002"]["status"] == "pending"
    recorder.trial_running(trials[2])
    recorder.flush()
    assert {r["name"]: r["status"] for r in recorder.store.list_trials(recorder.experiment_id)}["trial_00002"] == "running"
    # a name already recorded keeps its id, as add_trial does
    again = recorder.store.add_trials(recorder.experiment_id, [("trial_00001", {"x": 0.1}, "running")])
    assert again == [rows["trial_00001"]["id"]]


@pytest.mark.timeout(60)
def test_reports_wait_in_memory_at_most_the_flush_interval_and_starts_write_them_with_new_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import event

    from airflowless.tune import recording

    db = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    recorder = ExperimentRecorder("exp", str(tmp_path), TuneConfig(num_samples=2), {"x": 1})
    recorder.create()
    assert recorder.experiment_id is not None
    commits: list[int] = []  # transactions of the recorder (the test's reads are cleared after them)
    event.listen(recorder.store.engine, "commit", lambda _conn: commits.append(1))
    first, second = Trial("trial_00000", {"x": 0.1}, TrialStatus.RUNNING), Trial("trial_00001", {"x": 0.2},
                                                                                  TrialStatus.RUNNING)
    clock = [1000.0]
    monkeypatch.setattr(recording.time, "monotonic", lambda: clock[0])

    recorder.trials_starting([first])  # its record, in one transaction
    recorder.trial_started(first)
    for step in (1, 2):
        recorder.result(first, {"loss": 1.0 / step, "training_iteration": step,
                                "checkpoint_uri": "file:///ckpt" if step == 2 else None})
    recorder.flush_if_due()
    assert len(commits) == 1  # heard, not written yet
    assert recorder.store.trial_metrics(first.record_id) == []  # type: ignore[arg-type]
    commits.clear()

    recorder.trials_starting([second])  # what was heard and the new record: one transaction
    assert len(commits) == 1
    rows = {r["name"]: r for r in recorder.store.list_trials(recorder.experiment_id)}
    assert [m["step"] for m in recorder.store.trial_metrics(rows["trial_00000"]["id"])] == [1, 2]
    assert rows["trial_00000"]["iterations"] == 2 and rows["trial_00000"]["checkpoint_uri"] == "file:///ckpt"
    assert [c["step"] for c in recorder.store.trial_checkpoints(rows["trial_00000"]["id"])] == [2]
    assert second.record_id == rows["trial_00001"]["id"]
    commits.clear()

    recorder.result(second, {"loss": 0.5, "training_iteration": 1})
    clock[0] += recording.FLUSH_INTERVAL_S / 2
    recorder.flush_if_due()
    assert commits == []
    clock[0] += recording.FLUSH_INTERVAL_S
    recorder.flush_if_due()  # waited long enough: written
    assert len(commits) == 1
    assert [m["step"] for m in recorder.store.trial_metrics(second.record_id)] == [1]  # type: ignore[arg-type]
