"""The record of file and partition triggers: what each deployment's pattern matched, and which run took it.

Used through :class:`~airflowless.store.store.Store` (this is a mixin of it).
A match is taken in one transaction with the run it queues: a ``taken`` row
per key in ``trigger_seen`` and the queued run, under the queue's lock, so
whatever number of services watch the same pattern (on one PostgreSQL record),
each match starts one run; the unique index on (deployment, key) refuses a
second row if anything got past the lock. What was there when the deployment
was created is written ``existing`` and never runs (unless deployed with
``--include-existing``). A service that was stopped finds, when it starts, each
match that has no row: nothing that landed meanwhile is missed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, and_, select
from sqlalchemy.exc import IntegrityError

from ..errors import ConfigError
from . import schema
from .clock import aware, utc_now
from .service import Trigger, _insert_queued, _lock

if TYPE_CHECKING:
    from ..service.files import Match

__all__ = ["TriggerRecords"]


class TriggerRecords:
    engine: Engine

    if TYPE_CHECKING:  # ServiceRecords'
        def get_pipeline_deployment(self, name: str) -> dict[str, Any]: ...

    def file_deployments(self) -> list[dict[str, Any]]:
        """The deployments with a file trigger that the service should watch now (not paused, not broken)."""
        from .service import _deployment

        table = schema.pipeline_deployments
        with self.engine.begin() as conn:
            rows = conn.execute(select(table).where(and_(table.c.on_files.is_not(None), table.c.paused == 0,
                                                         table.c.broken.is_(None)))).mappings().all()
        return [_deployment(row) for row in rows if row["on_files"]]

    def trigger_text_params(self, deployment_id: int) -> list[str]:
        """The parameters deployment ``deployment_id``'s trigger sets from text its pipeline's types parse: what
        a file trigger matched, what an ``--after`` trigger passes along from the upstream run."""
        table = schema.pipeline_deployments
        with self.engine.begin() as conn:
            row = conn.execute(select(table.c.on_files, table.c.after).where(table.c.id == deployment_id)).first()
        if row is None:
            return []
        return [*((row.on_files or {}).get("params") or {}), *((row.after or {}).get("pass") or {})]

    def seen_keys(self, deployment_id: int) -> set[str]:
        """Every key deployment ``deployment_id``'s trigger took, or found there when it was deployed."""
        table = schema.trigger_seen
        with self.engine.begin() as conn:
            return set(conn.execute(select(table.c.key).where(table.c.deployment_id == deployment_id)).scalars())

    def record_existing(self, deployment_id: int, matches: list[Match]) -> int:
        """Write what the pattern matches at deploy time as ``existing`` (never run); how many were new."""
        table = schema.trigger_seen
        seen = self.seen_keys(deployment_id)
        fresh = [m for m in matches if m.key not in seen]
        if fresh:
            with self.engine.begin() as conn:
                conn.execute(table.insert(), [dict(deployment_id=deployment_id, key=m.key, status="existing",
                                                   run_id=None, files=m.files, newest=m.newest, seen_at=utc_now())
                                              for m in fresh])
        return len(fresh)

    def take_matches(self, deployment: dict[str, Any], matches: list[Match], params: dict[str, Any],
                     detail: str) -> int | None:
        """Queue one run of ``deployment`` for ``matches`` (one match, or a batch) with ``params`` added to its
        own; the run's id, or None if another service took any of them first."""
        table = schema.trigger_seen
        keys = [m.key for m in matches]
        with self.engine.begin() as conn:
            _lock(conn)
            if conn.execute(select(table.c.id).where(and_(table.c.deployment_id == deployment["id"],
                                                          table.c.key.in_(keys)))).first() is not None:
                return None
            nested = conn.begin_nested()
            try:
                run_id = _insert_queued(conn, deployment["pipeline"], target=deployment["target"],
                                        params={**deployment["params"], **params}, trigger=Trigger.FILES,
                                        deployment_id=deployment["id"], priority=deployment["priority"],
                                        pool=deployment["pool"], interval=None, rerun=0, backfill_id=None,
                                        detail=detail)
                conn.execute(table.insert(), [dict(deployment_id=deployment["id"], key=m.key, status="taken",
                                                   run_id=run_id, files=m.files, newest=m.newest, seen_at=utc_now())
                                              for m in matches])
            except IntegrityError:  # another service took one of them between our look and our write
                nested.rollback()
                return None
            nested.commit()
        return run_id

    def trigger_history(self, name: str, *, limit: int = 20) -> dict[str, Any]:
        """What deployment ``name``'s file trigger saw: how many matches it took and found at deploy time, and
        the newest ``limit`` it took (key, files, when, which run)."""
        from sqlalchemy import func

        deployment = self.get_pipeline_deployment(name)
        if not deployment.get("on_files"):
            raise ConfigError(f"deployment {name!r} has no file trigger (deploy it with --on-new-files)")
        table = schema.trigger_seen
        with self.engine.begin() as conn:
            counts: dict[str, int] = dict(conn.execute(select(table.c.status, func.count()).where(
                table.c.deployment_id == deployment["id"]).group_by(table.c.status)).all())
            rows = conn.execute(select(table).where(and_(table.c.deployment_id == deployment["id"],
                                                         table.c.status == "taken"))
                                .order_by(table.c.id.desc()).limit(limit)).mappings().all()

        return {"taken": int(counts.get("taken", 0)), "existing": int(counts.get("existing", 0)),
                "last": [{"key": row["key"], "run_id": row["run_id"], "files": row["files"],
                          "seen_at": aware(row["seen_at"])} for row in rows]}
