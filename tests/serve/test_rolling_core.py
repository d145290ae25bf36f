"""The controller core's rolling updates, event by event (no cluster): one new replica at a time, each running
one retiring an old one (drained), old and new routed together, a new version that cannot start rolled back."""

from __future__ import annotations

from airflowless.serve.config import DeploymentConfig
from airflowless.serve.controller import (
    Controller,
    DeploymentStatus,
    DeploymentUpdated,
    PublishReplicas,
    ReplicaFailed,
    ReplicaStarted,
    ReplicaStopped,
    StartReplica,
    StopReplica,
    Tick,
)

KEY = ("app", "Model")


def _running(core: Controller, replicas: int) -> list[str]:
    started = [a.replica_id for a in core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=replicas)))
               if isinstance(a, StartReplica)]
    for replica_id in started:
        core.handle(ReplicaStarted(replica_id, info=None))
    assert core.status(KEY) is DeploymentStatus.HEALTHY
    return started


def test_a_new_version_replaces_the_replicas_one_at_a_time_and_old_ones_drain() -> None:
    core = Controller()
    old = _running(core, 2)
    actions = core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=2), version=1))
    (first,) = [a for a in actions if isinstance(a, StartReplica)]
    assert first.version == 1 and not any(isinstance(a, StopReplica) for a in actions)  # one surge replica
    assert core.status(KEY) is DeploymentStatus.UPDATING
    actions = core.handle(ReplicaStarted(first.replica_id, info=None))
    stops = [a for a in actions if isinstance(a, StopReplica)]
    (second,) = [a for a in actions if isinstance(a, StartReplica)]
    (published,) = [a for a in actions if isinstance(a, PublishReplicas)]
    assert [s.drain for s in stops] == [True] and stops[0].replica_id in old
    assert first.replica_id in published.replica_ids and len(published.replica_ids) == 2  # never fewer than 2
    core.handle(ReplicaStopped(stops[0].replica_id))
    actions = core.handle(ReplicaStarted(second.replica_id, info=None))
    (last_stop,) = [a for a in actions if isinstance(a, StopReplica)]
    assert {last_stop.replica_id, stops[0].replica_id} == set(old)
    core.handle(ReplicaStopped(last_stop.replica_id))
    assert core.status(KEY) is DeploymentStatus.HEALTHY
    assert {r.version for r in core.replicas.values()} == {1} and len(core.replicas) == 2


def test_a_new_version_that_cannot_start_is_rolled_back_and_the_old_replicas_never_stop() -> None:
    core = Controller()
    old = _running(core, 1)
    actions = core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=1), version=1))
    now = 0.0
    for _ in range(3):
        (start,) = [a for a in actions if isinstance(a, StartReplica)]
        actions = core.handle(ReplicaFailed(start.replica_id, "ImportError: no module", while_starting=True))
        assert not any(isinstance(a, StopReplica) and a.replica_id in old for a in actions)
        if not [a for a in actions if isinstance(a, StartReplica)]:  # waiting out the backoff
            now += 10
            actions = core.handle(Tick(now))
    dep = core.deployments[KEY]
    assert dep.version == 0 and dep.rolling_from is None
    assert "version 1 rolled back to 0" in dep.rolled_back and "ImportError" in dep.rolled_back
    assert list(core.replicas) == old and core.status(KEY) is DeploymentStatus.HEALTHY
