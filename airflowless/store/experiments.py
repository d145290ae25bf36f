"""The record of experiments: a Trainer's fit or a Tuner's search, its trials, metrics and checkpoints.

Used through :class:`~airflowless.store.store.Store` (this is a mixin of it).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Engine, and_, desc, select

from ..jsonsafe import to_plain as _plain
from . import schema

__all__ = ["ExperimentRecords"]

_TRIAL_FIELDS = {"status", "config", "restarts", "iterations", "last_metrics", "checkpoint_uri",
                 "finished_at", "error"}


def _now() -> datetime:
    return datetime.now(timezone.utc)


class ExperimentRecords:
    engine: Engine

    def create_experiment(self, name: str, *, kind: str, config: dict[str, Any], storage_path: str | None = None,
                          metric: str | None = None, mode: str | None = None) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(schema.experiments.insert().values(
                name=name, kind=kind, status="running", config=_plain(config), storage_path=storage_path,
                metric=metric, mode=mode, created_at=_now()))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def finish_experiment(self, experiment_id: int, status: str, *, error: str | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.experiments.update().where(schema.experiments.c.id == experiment_id)
                         .values(status=status, error=error, finished_at=_now()))

    def set_experiment_status(self, experiment_id: int, status: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.experiments.update().where(schema.experiments.c.id == experiment_id)
                         .values(status=status, finished_at=None))

    def find_experiment(self, name_or_id: str | int) -> dict[str, Any] | None:
        table = schema.experiments
        query = select(table).order_by(desc(table.c.id)).limit(1)
        if isinstance(name_or_id, int) or str(name_or_id).isdigit():
            query = query.where(table.c.id == int(name_or_id))
        else:
            query = query.where(table.c.name == str(name_or_id))
        with self.engine.begin() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else dict(row)

    def list_experiments(self, *, limit: int = 50) -> list[dict[str, Any]]:
        table = schema.experiments
        with self.engine.begin() as conn:
            rows = conn.execute(select(table).order_by(desc(table.c.id)).limit(limit)).mappings().all()
        return [dict(r) for r in rows]

    def add_trial(self, experiment_id: int, name: str, *, config: dict[str, Any], status: str = "pending") -> int:
        with self.engine.begin() as conn:
            existing = conn.execute(select(schema.trials.c.id).where(and_(
                schema.trials.c.experiment_id == experiment_id, schema.trials.c.name == name))).scalar()
            if existing is not None:
                return int(existing)
            result = conn.execute(schema.trials.insert().values(
                experiment_id=experiment_id, name=name, status=status, config=_plain(config), restarts=0,
                iterations=0, created_at=_now()))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def add_trials(self, experiment_id: int, trials: list[tuple[str, dict[str, Any], str]]) -> list[int]:
        """:meth:`add_trial` for several ``(name, config, status)`` in one transaction (Tune starts trials so)."""
        ids: list[int] = []
        if not trials:
            return ids
        with self.engine.begin() as conn:
            names = [name for name, _, _ in trials]
            existing = dict(conn.execute(select(schema.trials.c.name, schema.trials.c.id).where(and_(
                schema.trials.c.experiment_id == experiment_id, schema.trials.c.name.in_(names)))).all())
            for name, config, status in trials:
                if name not in existing:
                    result = conn.execute(schema.trials.insert().values(
                        experiment_id=experiment_id, name=name, status=status, config=_plain(config), restarts=0,
                        iterations=0, created_at=_now()))
                    existing[name] = result.inserted_primary_key[0]  # type: ignore[index]
                ids.append(int(existing[name]))
        return ids

    def update_trial(self, trial_id: int, **fields: Any) -> None:
        unknown = set(fields) - _TRIAL_FIELDS
        if unknown:
            raise TypeError(f"update_trial got unknown fields {sorted(unknown)}")
        if "last_metrics" in fields:
            fields["last_metrics"] = _plain(fields["last_metrics"])
        if "config" in fields:
            fields["config"] = _plain(fields["config"])
        with self.engine.begin() as conn:
            conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(**fields))

    def add_metrics(self, trial_id: int, step: int, values: dict[str, Any]) -> None:
        """One report of a trial; a repeated step (a replayed report) replaces nothing and is ignored."""
        with self.engine.begin() as conn:
            exists = conn.execute(select(schema.metrics.c.id).where(and_(
                schema.metrics.c.trial_id == trial_id, schema.metrics.c.step == step))).scalar()
            if exists is None:
                conn.execute(schema.metrics.insert().values(trial_id=trial_id, step=step, values=_plain(values),
                                                            created_at=_now()))

    def add_checkpoint(self, trial_id: int, step: int, uri: str, metrics: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.checkpoints.insert().values(trial_id=trial_id, step=step, uri=uri,
                                                            metrics=_plain(metrics), deleted=0, created_at=_now()))

    def mark_checkpoint_deleted(self, uri: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.checkpoints.update().where(schema.checkpoints.c.uri == uri).values(deleted=1))

    def list_trials(self, experiment_id: int) -> list[dict[str, Any]]:
        table = schema.trials
        with self.engine.begin() as conn:
            rows = conn.execute(select(table).where(table.c.experiment_id == experiment_id)
                                .order_by(table.c.id)).mappings().all()
        return [dict(r) for r in rows]

    def trial_metrics(self, trial_id: int) -> list[dict[str, Any]]:
        table = schema.metrics
        with self.engine.begin() as conn:
            rows = conn.execute(select(table.c.step, table.c["values"]).where(table.c.trial_id == trial_id)
                                .order_by(table.c.step)).all()
        return [{"step": step, **values} for step, values in rows]

    def trial_checkpoints(self, trial_id: int, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        table = schema.checkpoints
        query = select(table).where(table.c.trial_id == trial_id).order_by(table.c.step)
        if not include_deleted:
            query = query.where(table.c.deleted == 0)
        with self.engine.begin() as conn:
            return [dict(r) for r in conn.execute(query).mappings().all()]

    def record_batch(self, metrics_rows: list[tuple[int, int, dict[str, Any]]],
                     trial_updates: dict[int, dict[str, Any]]) -> None:
        """Many reports and trial updates in one transaction (Tune's recorder flushes this way)."""
        if not metrics_rows and not trial_updates:
            return
        now = _now()
        with self.engine.begin() as conn:
            if metrics_rows:
                conn.execute(schema.metrics.insert(), [
                    {"trial_id": t, "step": step, "values": _plain(values), "created_at": now}
                    for t, step, values in metrics_rows])
            for trial_id, fields in trial_updates.items():
                unknown = set(fields) - _TRIAL_FIELDS
                if unknown:
                    raise TypeError(f"record_batch got unknown trial fields {sorted(unknown)}")
                clean = {k: (_plain(v) if k in ("last_metrics", "config") else v) for k, v in fields.items()}
                conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(**clean))
