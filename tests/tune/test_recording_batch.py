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
    assert rows["trial_00002"]["config"] == {"x": 0.9} and rows["trial_00002"]["status"] == "running"
    # a name already recorded keeps its id, as add_trial does
    again = recorder.store.add_trials(recorder.experiment_id, [("trial_00001", {"x": 0.1}, "running")])
    assert again == [rows["trial_00001"]["id"]]
