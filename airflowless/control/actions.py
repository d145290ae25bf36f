"""Actions: cancel a run, stop a trial or an experiment, scale a deployment — on the live cluster.

How an action reaches the work it steers: every driver listens on a control
topic of the scheduler's event broker for each thing it runs, and turns what
arrives into the same event its own code produces.

======================  ===========================================  ==========================================
action                  topic the driver subscribes to               what the driver does with it
======================  ===========================================  ==========================================
``cancel_run``          ``airflowless-control:run:<pipeline>:<id>``  raises :class:`~airflowless.errors.RunCancelled`
                                                                     in its watch loop, as SIGINT does: futures
                                                                     cancelled, run and stages ``cancelled``
``stop_trial``          ``airflowless-control:experiment:<id>``      ``TuneController.stop_trial`` -> ``Stop``, as
                                                                     when a scheduler stops it; recorded ``stopped``
``stop_experiment``     same                                         ``TuneController.stop_experiment``: no new
                                                                     trials, every unfinished one stopped;
                                                                     the experiment is recorded ``stopped``
``scale_deployment``    ``airflowless-control:serve:<app>``          ``DeploymentUpdated`` with ``num_replicas=n``,
                                                                     as ``serve.run`` of that count does (the
                                                                     scheduler side records the new count)
======================  ===========================================  ==========================================

The scheduler side (the functions here, called by the API's POST routes)
checks the request against the record, checks that a live client listens on
the topic (else :class:`~.errors.Unavailable`: no driver, e.g. under
``airflowless ui`` or after the driver died), publishes
``scheduler.log_event(topic, message)`` and answers at once with what it
asked for: the effect follows within a moment and shows in the record. Each
function is a coroutine to run on the scheduler's event loop (store reads go
to a thread).

The driver side is :func:`listen`: ``with listen(client, topic, handler):``
calls ``handler(message)`` on the client's event loop for every request.

>>> run_topic("taxi", 7)
'airflowless-control:run:taxi:7'
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from ..runtime.topics import Subscription
from .context import ControlContext
from .errors import BadRequest, Conflict, NotFound, Unavailable

__all__ = ["cancel_run", "stop_trial", "stop_experiment", "scale_deployment",
           "listen", "run_topic", "experiment_topic", "serve_topic", "PREFIX"]

PREFIX = "airflowless-control"
logger = logging.getLogger(__name__)
_NO_SCHEDULER = ("this server has no cluster (it serves the record only, like `airflowless ui`); actions "
                 "need the control plane of the scheduler the work runs on: open the dashboard link "
                 "the driver printed")


def run_topic(pipeline: str, run_id: int) -> str:
    """The topic the driver of run ``run_id`` of ``pipeline`` listens on."""
    return f"{PREFIX}:run:{pipeline}:{run_id}"


def experiment_topic(experiment_id: int) -> str:
    """The topic the Tuner recording experiment ``experiment_id`` listens on."""
    return f"{PREFIX}:experiment:{experiment_id}"


def serve_topic(app: str) -> str:
    """The topic the serve controller running application ``app`` listens on."""
    return f"{PREFIX}:serve:{app}"


# -- driver side ------------------------------------------------------------------------------------
def listen(client: Any, topic: str, handler: Callable[[dict[str, Any]], None]) -> Subscription:
    """Until closed (``with listen(...):``), call ``handler(message)`` for each request published on ``topic``.

    ``handler`` runs on the client's event loop: it should only hand the request
    over (set a flag, put it in a queue, feed a core on that loop).
    """
    def on_message(message: Any) -> None:
        if isinstance(message, dict):
            handler(message)

    return Subscription(client, topic, on_message)


# -- scheduler side ---------------------------------------------------------------------------------
async def _read(ctx: ControlContext, fn: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(ctx.readers(), fn)


def _publish(ctx: ControlContext, topic: str, message: dict[str, Any], *, nobody: str) -> int:
    """Send ``message`` to the live drivers on ``topic``; how many; Unavailable when none listens."""
    from .._dask_internals import topic_subscribers

    scheduler = _scheduler(ctx)
    listeners = topic_subscribers(scheduler, topic)
    if not listeners:
        raise Unavailable(nobody)
    scheduler.log_event(topic, {**message, "by": "control plane"})
    return len(listeners)


def _scheduler(ctx: ControlContext) -> Any:
    if ctx.scheduler is None:
        raise Unavailable(_NO_SCHEDULER)
    return ctx.scheduler


def _int_id(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"a {what} id is a whole number, got {value!r}") from None
    if number < 1:
        raise BadRequest(f"a {what} id is a whole number from 1 up, got {value!r}")
    return number


async def cancel_run(ctx: ControlContext, run_id: Any) -> dict[str, Any]:
    """Cancel a queued run (in the record: its driver will not start it), or a running one: its driver
    stops it as on SIGINT (run and stages ``cancelled``).

    NotFound: no such run; Conflict: it has finished; Unavailable: no live driver.
    """
    from ..store.records import RunStatus

    run_id = _int_id(run_id, "run")
    store = ctx.store()
    if await _read(ctx, lambda: store.cancel_queued_run(run_id, "cancelled from the control plane")):
        return {"run_id": run_id, "action": "cancel", "accepted": True, "drivers": 0, "was": RunStatus.QUEUED}
    _scheduler(ctx)

    def read() -> Any:
        try:
            return store.get_run(run_id)
        except KeyError:
            return None

    record = await _read(ctx, read)
    if record is None:
        raise NotFound(f"no run with id {run_id} in this record")
    if record.status != RunStatus.RUNNING:
        raise Conflict(f"run {run_id} has already finished ({record.status}); only a running run can be cancelled")
    listeners = _publish(ctx, run_topic(record.pipeline, run_id), {"action": "cancel", "run_id": run_id},
                         nobody=f"no live driver of run {run_id} is connected to this scheduler (it runs on "
                                f"{record.address or 'another cluster'}, or its driver died: it will be "
                                "recorded as abandoned)")
    return {"run_id": run_id, "action": "cancel", "accepted": True, "drivers": listeners}


async def stop_trial(ctx: ControlContext, trial_id: Any) -> dict[str, Any]:
    """Stop one trial of a running experiment, as when its Tune scheduler stops it (recorded ``stopped``).

    ``trial_id`` is the trial's id in the record (the API's and the pages' id).
    """
    _scheduler(ctx)
    trial_id = _int_id(trial_id, "trial")
    store = ctx.store()

    def read() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        from sqlalchemy import select

        from ..store import schema

        with store.engine.begin() as conn:
            row = conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).mappings().first()
        if row is None:
            return None, None
        return dict(row), store.find_experiment(int(row["experiment_id"]))

    trial, experiment = await _read(ctx, read)
    if trial is None:
        raise NotFound(f"no trial with id {trial_id} in this record")
    if trial["status"] not in ("pending", "running", "paused"):
        raise Conflict(f"trial {trial_id} ({trial['name']}) has already ended ({trial['status']})")
    if experiment is None or experiment["status"] != "running":
        state = experiment["status"] if experiment else "gone"
        raise Conflict(f"trial {trial_id}'s experiment is not running ({state})")
    listeners = _publish(ctx, experiment_topic(int(trial["experiment_id"])),
                         {"action": "stop_trial", "trial": trial["name"]},
                         nobody=f"no live Tuner of experiment {experiment['name']!r} is connected to this "
                                "scheduler (its driver may have died; `Tuner.restore` continues it)")
    return {"trial_id": trial_id, "trial": trial["name"], "action": "stop", "accepted": True, "drivers": listeners}


async def stop_experiment(ctx: ControlContext, experiment_id: Any) -> dict[str, Any]:
    """Stop a running experiment: no new trials, every unfinished one stopped; recorded ``stopped``."""
    _scheduler(ctx)
    experiment_id = _int_id(experiment_id, "experiment")
    store = ctx.store()
    experiment = await _read(ctx, lambda: store.find_experiment(experiment_id))
    if experiment is None:
        raise NotFound(f"no experiment with id {experiment_id} in this record")
    if experiment["status"] != "running":
        raise Conflict(f"experiment {experiment_id} ({experiment['name']}) is not running ({experiment['status']})")
    listeners = _publish(ctx, experiment_topic(experiment_id), {"action": "stop"},
                         nobody=f"no live Tuner of experiment {experiment['name']!r} is connected to this "
                                "scheduler (its driver may have died; `Tuner.restore` continues it)")
    return {"experiment_id": experiment_id, "action": "stop", "accepted": True, "drivers": listeners}


async def scale_deployment(ctx: ControlContext, app: str, deployment: str, replicas: Any) -> dict[str, Any]:
    """Run ``replicas`` replicas of a deployment, as ``serve.run`` with that ``num_replicas`` would.

    A fixed count replaces the deployment's autoscaling bounds until it is deployed again.
    """
    _scheduler(ctx)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= 1000:
        raise BadRequest(f"'replicas' is a whole number from 0 to 1000, got {replicas!r}; "
                         'send {"replicas": 2}')
    from .live import latest_serve

    served = {d["deployment"] for d in latest_serve(ctx.scheduler)["deployments"] if d["app"] == app}
    if served and deployment not in served:
        raise NotFound(f"application {app!r} has no deployment {deployment!r}; it has {sorted(served)}")
    listeners = _publish(ctx, serve_topic(app), {"action": "scale", "deployment": deployment,
                                                 "replicas": replicas},
                         nobody=f"no serve controller running application {app!r} is connected to this "
                                "scheduler (see `airflowless serve status`)")
    recorded = await _read(ctx, lambda: _record_replicas(ctx, app, deployment, replicas))
    return {"app": app, "deployment": deployment, "replicas": replicas, "action": "scale", "accepted": True,
            "drivers": listeners, "recorded": recorded}


def _record_replicas(ctx: ControlContext, app: str, deployment: str, replicas: int) -> int:
    """Give the deployment's running rows in the record the new count, as a new ``serve.run`` would (the
    serve page's recorded table shows the target at once); how many rows. The scale stands without it."""
    from ..store import schema
    from ..store.deployments import DeploymentStatus

    table = schema.deployments
    try:
        with ctx.store().engine.begin() as conn:
            return int(conn.execute(table.update().where(
                table.c.app == app, table.c.deployment == deployment, table.c.status == DeploymentStatus.RUNNING,
            ).values(num_replicas=replicas, updated_at=datetime.now(timezone.utc))).rowcount)
    except Exception as exc:  # no store here, or it cannot be written: the drivers have the request already
        logger.warning("airflowless: scaled %s/%s to %d but could not record it (%s)", app, deployment, replicas, exc)
        return 0
