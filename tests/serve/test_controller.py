"""The controller core and the autoscaling decision, driven by scripted events (no cluster)."""

from __future__ import annotations

from airflowless.serve.autoscaling import decide, wanted_replicas
from airflowless.serve.config import AutoscalingConfig, DeploymentConfig
from airflowless.serve.controller import (
    Controller,
    DeploymentDeleted,
    DeploymentStatus,
    DeploymentUpdated,
    PublishReplicas,
    ReplicaFailed,
    ReplicaMetrics,
    ReplicaStarted,
    ReplicaStopped,
    StartReplica,
    StopReplica,
    Tick,
)

KEY = ("app", "M")


def started(core: Controller, actions: list) -> list:
    out = []
    for action in actions:
        if isinstance(action, StartReplica):
            out += core.handle(ReplicaStarted(action.replica_id, info=action.replica_id))
    return out


def test_start_to_target_and_publish() -> None:
    core = Controller()
    actions = core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=2)))
    assert [type(a) for a in actions] == [StartReplica, StartReplica]
    assert core.status(KEY) is DeploymentStatus.UPDATING
    after = started(core, actions)
    assert after[-1] == PublishReplicas(KEY, ("app/M#1", "app/M#2"))
    assert core.status(KEY) is DeploymentStatus.HEALTHY


def test_dead_replica_is_replaced_and_unpublished() -> None:
    core = Controller()
    started(core, core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=2))))
    actions = core.handle(ReplicaFailed("app/M#1", "health check failed"))
    assert PublishReplicas(KEY, ("app/M#2",)) in actions
    assert StopReplica(KEY, "app/M#1", drain=False) in actions
    assert any(isinstance(a, StartReplica) for a in actions)
    assert "health check failed" in core.deployments[KEY].message


def test_repeated_start_failures_fail_the_deployment() -> None:
    core = Controller()
    actions = core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=1)))
    for _ in range(3):
        start = next(a for a in actions if isinstance(a, StartReplica))
        actions = core.handle(ReplicaFailed(start.replica_id, "ImportError: no module", while_starting=True))
    assert core.status(KEY) is DeploymentStatus.DEPLOY_FAILED
    assert not any(isinstance(a, StartReplica) for a in actions)


def test_scale_down_drains_least_busy_then_delete() -> None:
    core = Controller()
    started(core, core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=3))))
    core.handle(ReplicaMetrics("app/M#1", 5))
    core.handle(ReplicaMetrics("app/M#2", 0))
    core.handle(ReplicaMetrics("app/M#3", 2))
    actions = core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=2)))
    assert StopReplica(KEY, "app/M#2", drain=True) in actions
    assert actions[0] == PublishReplicas(KEY, ("app/M#1", "app/M#3"))
    core.handle(ReplicaStopped("app/M#2"))
    actions = core.handle(DeploymentDeleted(KEY))
    assert {a.replica_id for a in actions if isinstance(a, StopReplica)} == {"app/M#1", "app/M#3"}


def test_autoscaling_tick_scales_up_after_delay_then_down() -> None:
    auto = AutoscalingConfig(min_replicas=1, max_replicas=3, target_ongoing_requests=2,
                             upscale_delay_s=1, downscale_delay_s=2)
    core = Controller()
    started(core, core.handle(DeploymentUpdated(KEY, DeploymentConfig(autoscaling_config=auto))))
    core.handle(ReplicaMetrics("app/M#1", 6))
    assert core.handle(Tick(0.0)) == []
    actions = core.handle(Tick(1.0))
    assert sum(isinstance(a, StartReplica) for a in actions) == 2
    started(core, actions)
    for rid in ("app/M#1", "app/M#2", "app/M#3"):
        core.handle(ReplicaMetrics(rid, 0))
    assert core.handle(Tick(2.0)) == []
    actions = core.handle(Tick(4.5))
    assert sum(isinstance(a, StopReplica) for a in actions) == 2


def test_autoscaling_decision_is_pure() -> None:
    cfg = AutoscalingConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=2,
                            upscale_delay_s=1, downscale_delay_s=5)
    assert wanted_replicas(cfg, 0) == 1 and wanted_replicas(cfg, 100) == 4 and wanted_replicas(cfg, 4) == 2
    d = decide(cfg, current=1, ongoing=7, now=0, pending=None)
    assert d.desired == 1 and d.pending is not None
    assert decide(cfg, current=1, ongoing=7, now=0.5, pending=d.pending).desired == 1
    assert decide(cfg, current=1, ongoing=7, now=1.0, pending=d.pending).desired == 4
    # a blip down does not survive: the wish resets when the direction changes
    down = decide(cfg, current=4, ongoing=0, now=10, pending=None)
    up_again = decide(cfg, current=4, ongoing=8, now=12, pending=down.pending)
    assert up_again == type(up_again)(4, None)
    assert decide(cfg, current=4, ongoing=0, now=15, pending=down.pending).desired == 1
    # queued requests count: the ingress sees 3 queued on one replica at target 2
    assert decide(cfg, current=1, ongoing=3, now=0, pending=None).pending.desired == 2  # type: ignore[union-attr]


def test_a_deployment_that_ran_waits_for_capacity_with_backoff_and_recovers() -> None:
    core = Controller()
    started(core, core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=1))))
    now = 10.0
    core.handle(Tick(now))
    actions = core.handle(ReplicaFailed("app/M#1", "health check failed"))  # its worker died
    for attempt in range(6):  # the worker is gone: every start fails to place, far more than 3 times
        start = next(a for a in actions if isinstance(a, StartReplica))
        actions = core.handle(ReplicaFailed(start.replica_id, "ServeError: no worker has resources {} free",
                                            while_starting=True))
        assert not any(isinstance(a, StartReplica) for a in actions)  # not at once: after a backoff
        assert core.status(KEY) is DeploymentStatus.UNHEALTHY
        published = [a for a in actions if isinstance(a, PublishReplicas)]
        if attempt == 0:
            assert published and published[0].replica_ids == () and "no worker has resources" in \
                published[0].unavailable
        backoff = min(0.5 * 2 ** attempt, 5.0)
        assert core.handle(Tick(now + backoff - 0.01)) == []
        now += backoff
        actions = core.handle(Tick(now))
    start = next(a for a in actions if isinstance(a, StartReplica))
    actions = core.handle(ReplicaStarted(start.replica_id, info=start.replica_id))  # the worker is back
    assert PublishReplicas(KEY, (start.replica_id,), "") in actions
    assert core.status(KEY) is DeploymentStatus.HEALTHY


def test_a_new_deployment_that_cannot_start_still_fails_fast() -> None:
    core = Controller()
    actions = core.handle(DeploymentUpdated(KEY, DeploymentConfig(num_replicas=1)))
    for _ in range(3):
        start = next(a for a in actions if isinstance(a, StartReplica))
        actions = core.handle(ReplicaFailed(start.replica_id, "no worker has resources", while_starting=True))
    assert core.status(KEY) is DeploymentStatus.DEPLOY_FAILED
    assert core.handle(Tick(1e9)) == []
