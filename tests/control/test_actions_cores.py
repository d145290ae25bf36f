"""What a control-plane request does inside the cores, with scripted events (no cluster):
the Tune controller's stop of one trial or of the experiment, the serve controller's scale."""

from __future__ import annotations

from airflowless.serve.config import DeploymentConfig
from airflowless.serve.controller import (
    Controller,
    DeploymentUpdated,
    ReplicaStarted,
    StartReplica,
    StopReplica,
)
from airflowless.tune.controller import Start, Stop, TuneController
from airflowless.tune.search.searcher import BasicVariantGenerator
from airflowless.tune.trial import TrialStatus


def _tune(samples: int, concurrent: int) -> TuneController:
    searcher = BasicVariantGenerator()
    searcher.set_search_properties("loss", "min", {"x": 1}, samples, 0)
    return TuneController(searcher=searcher, max_concurrent=concurrent)


def test_a_stopped_running_trial_gets_stop_and_ends_with_its_run() -> None:
    core = _tune(samples=3, concurrent=2)
    started = [a.trial.trial_id for a in core.next_actions() if isinstance(a, Start)]
    assert started == ["trial_00000", "trial_00001"]
    actions = core.stop_trial("trial_00000")
    assert [type(a) for a in actions] == [Stop] and core.trials["trial_00000"].status == TrialStatus.RUNNING
    assert not core.accepts("trial_00000")  # later reports are not the trial's
    core.on_complete("trial_00000")
    assert core.trials["trial_00000"].status == TrialStatus.TERMINATED and "trial_00000" in core.stopped
    assert [a.trial.trial_id for a in core.next_actions()] == ["trial_00002"]  # the freed slot is used
    assert core.stop_trial("trial_00000") == []  # once ended: nothing


def test_a_stopped_experiment_starts_nothing_and_stops_every_unfinished_trial() -> None:
    core = _tune(samples=5, concurrent=2)
    core.next_actions()
    core.on_error("trial_00001", "boom")  # errored: not touched
    actions = core.stop_experiment()
    assert {a.trial.trial_id for a in actions} == {"trial_00000"}
    assert core.stop_requested and core.next_actions() == []
    core.on_complete("trial_00000")
    assert core.done and len(core.trials) == 2
    state = core.get_state()
    restored = _tune(samples=5, concurrent=2)
    restored.set_state(state)
    assert restored.stopped == {"trial_00000"} and restored.stop_requested


def test_a_trial_stopped_while_it_pauses_ends_when_its_run_stops() -> None:
    core = _tune(samples=1, concurrent=1)
    core.next_actions()
    trial = core.trials["trial_00000"]
    trial.status = TrialStatus.PAUSED  # a scheduler's PAUSE was sent; the run has not stopped yet
    assert core.stop_trial("trial_00000") == []
    core.on_paused("trial_00000", in_memory=True)
    assert trial.status == TrialStatus.TERMINATED and "trial_00000" not in core.resumable


def test_scaling_a_running_deployment_starts_or_drains_replicas_and_keeps_its_history() -> None:
    core = Controller()
    key = ("app", "Model")
    [start] = core.handle(DeploymentUpdated(key, DeploymentConfig(num_replicas=1)))
    assert isinstance(start, StartReplica)
    core.handle(ReplicaStarted(start.replica_id, info=None))
    actions = core.handle(DeploymentUpdated(key, DeploymentConfig(num_replicas=2)))  # what a scale sends
    assert [type(a) for a in actions] == [StartReplica]
    assert core.deployments[key].started_once  # a replica failing to start now is retried, not DEPLOY_FAILED
    core.handle(ReplicaStarted(actions[0].replica_id, info=None))
    actions = core.handle(DeploymentUpdated(key, DeploymentConfig(num_replicas=1)))
    assert [type(a) for a in actions if not hasattr(a, "replica_ids")] == [StopReplica]
