"""The record of notifications: what is due about which run, claimed once, and how sending it went.

Used through :class:`~airflowless.store.store.Store` (this is a mixin of it).
Each pass of a service looks, for every deployment that notifies, at its runs
since it last changed (a new ``--notify`` does not page anyone for last month's
failures) and finds the events due (:mod:`airflowless.service.notify`): a run
that ended, one whose stage is being retried, one past its deadline. Each is
written ``sending`` under a unique (run, event, channel) before it is sent, so
whatever number of services look, and however often, each goes out once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, and_, or_, select
from sqlalchemy.exc import IntegrityError

from . import schema
from .clock import aware, utc_now
from .service import _lock, _record

__all__ = ["NotificationRecords"]


class NotificationRecords:
    engine: Engine

    def claim_notifications(self, *, window: int = 200, now: datetime | None = None) -> list[dict[str, Any]]:
        """Write a ``sending`` row for each notification due and not yet written; those rows with what to send
        (``rule``, ``message``, the deployment's ``target``). The newest ``window`` runs of each deployment are
        looked at."""
        from ..service.notify import due_events, message

        table, runs, sent = schema.pipeline_deployments, schema.pipeline_runs, schema.notifications
        now = now or utc_now()
        claimed: list[dict[str, Any]] = []
        with self.engine.begin() as conn:
            notifying = [row for row in conn.execute(select(table).where(table.c.notify.is_not(None))).mappings()
                         if row["notify"]]
            if not notifying:
                return []
            _lock(conn)
            for row in notifying:
                claimed += _claim_data_late(conn, row, now)
                changed = row["updated_at"]
                rows = conn.execute(select(runs).where(and_(runs.c.deployment_id == row["id"], or_(
                    runs.c.finished_at >= changed, and_(runs.c.finished_at.is_(None), runs.c.created_at >= changed))))
                    .order_by(runs.c.id.desc()).limit(window)).mappings().all()
                if not rows:
                    continue
                found = [_record(r) for r in rows]
                retried = _retried_stages(conn, [r.id for r in found]) \
                    if any(rule["on"] == "on_retry" for rule in row["notify"]) else {}
                events = due_events(found, row["notify"], deadline_s=row["deadline_s"], retried=retried, now=now)
                if not events:
                    continue
                done = {(r.run_id, r.event, r.channel) for r in conn.execute(
                    select(sent.c.run_id, sent.c.event, sent.c.channel).where(
                        sent.c.run_id.in_([run.id for run, *_ in events])))}
                events = [e for e in events if (e[0].id, e[1], e[3]) not in done]
                failed = _failed_stages(conn, [run.id for run, event, *_ in events if event == "on_failure"])
                for run, event, rule, channel, extra in events:
                    if (run.id, event, channel) in done:  # two rules on one channel: one message
                        continue
                    if event == "on_failure" and run.id in failed:
                        extra = {**extra, "stage": failed[run.id][0], "stage_error": failed[run.id][1]}
                    nested = conn.begin_nested()
                    try:
                        result = conn.execute(sent.insert().values(run_id=run.id, event=event, channel=channel,
                                                                   status="sending", attempts=0, created_at=utc_now()))
                    except IntegrityError:  # another service wrote it first: it sends it
                        nested.rollback()
                        continue
                    nested.commit()
                    done.add((run.id, event, channel))
                    claimed.append({"id": int(result.inserted_primary_key[0]),  # type: ignore[index]
                                    "run_id": run.id, "channel": channel, "rule": dict(rule),
                                    "target": row["target"], "message": message(run, row["name"], event, **extra)})
        return claimed

    def finish_notification(self, notification_id: int, *, sent: bool, attempts: int, error: str | None = None,
                            about: str = "run") -> None:
        """Record how sending notification ``notification_id`` went (``about``: "run", or "deployment" for an
        alert about a deployment, its data late)."""
        table = schema.notifications if about == "run" else schema.deployment_alerts
        with self.engine.begin() as conn:
            conn.execute(table.update().where(table.c.id == notification_id).values(
                status="sent" if sent else "failed", attempts=attempts, error=error,
                sent_at=utc_now() if sent else None))

    def notifications_of(self, run_id: int) -> list[dict[str, Any]]:
        """What was sent (or tried) about run ``run_id``: event, channel (a secret's name), status, error."""
        table = schema.notifications
        with self.engine.begin() as conn:
            rows = conn.execute(select(table).where(table.c.run_id == run_id).order_by(table.c.id)).mappings().all()
        return [{**dict(row), "created_at": aware(row["created_at"]), "sent_at": aware(row["sent_at"])}
                for row in rows]


    def deployment_alerts(self, deployment_id: int, *, limit: int = 20) -> list[dict[str, Any]]:
        """The newest alerts about deployment ``deployment_id`` itself (its data late): event, channel, since,
        status, error."""
        table = schema.deployment_alerts
        with self.engine.begin() as conn:
            rows = conn.execute(select(table).where(table.c.deployment_id == deployment_id)
                                .order_by(table.c.id.desc()).limit(limit)).mappings().all()
        return [{**dict(row), **{k: aware(row[k]) for k in ("since", "created_at", "sent_at")}} for row in rows]


def _claim_data_late(conn: Any, row: Any, now: datetime) -> list[dict[str, Any]]:
    """Deployment ``row``'s alert that it started no run for longer than it expects one, once per silence
    (counted from its last run, or from when it last changed), on its on_late and on_failure channels."""
    from sqlalchemy import func

    from ..service.channels import label
    from ..service.notify import data_late_message

    expect = row["expect_every_s"]
    if not expect:
        return []
    runs, alerts = schema.pipeline_runs, schema.deployment_alerts
    last = aware(conn.execute(select(func.max(runs.c.created_at)).where(runs.c.deployment_id == row["id"])).scalar())
    changed = aware(row["updated_at"])
    assert changed is not None
    since = max(last, changed) if last is not None else changed
    if (now - since).total_seconds() < expect:
        return []
    claimed: list[dict[str, Any]] = []
    for rule in row["notify"]:
        if rule["on"] not in ("on_late", "on_failure"):
            continue
        nested = conn.begin_nested()
        try:
            result = conn.execute(alerts.insert().values(deployment_id=row["id"], event="on_late_data",
                                                         channel=label(rule), since=since, status="sending",
                                                         attempts=0, created_at=utc_now()))
        except IntegrityError:  # told already (by this service or another) for this silence
            nested.rollback()
            continue
        nested.commit()
        claimed.append({"id": int(result.inserted_primary_key[0]), "about": "deployment",  # type: ignore[index]
                        "run_id": None, "channel": label(rule), "rule": dict(rule), "target": row["target"],
                        "message": data_late_message(row["name"], row["pipeline"], since, expect)})
    return claimed


def _failed_stages(conn: Any, run_ids: list[int]) -> dict[int, tuple[str, str | None]]:
    """Run id -> (its first stage that failed, that stage's error)."""
    if not run_ids:
        return {}
    stages = schema.stage_runs
    found: dict[int, tuple[str, str | None]] = {}
    for row in conn.execute(select(stages.c.run_id, stages.c.node, stages.c.error).where(and_(
            stages.c.run_id.in_(run_ids), stages.c.status.in_(("failed", "timed_out")))).order_by(stages.c.id)):
        found.setdefault(row.run_id, (row.node, row.error))
    return found


def _retried_stages(conn: Any, run_ids: list[int]) -> dict[int, tuple[str, str | None]]:
    """Run id -> (its first stage that started a second attempt, that stage's last error)."""
    stages = schema.stage_runs
    found: dict[int, tuple[str, str | None]] = {}
    for row in conn.execute(select(stages.c.run_id, stages.c.node, stages.c.error).where(and_(
            stages.c.run_id.in_(run_ids), stages.c.attempts >= 2)).order_by(stages.c.id)):
        found.setdefault(row.run_id, (row.node, row.error))
    return found

