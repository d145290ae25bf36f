"""The record of experiments: a Trainer's fit or a Tuner's search, its trials, metrics and checkpoints.

Used through :class:`~airflowless.store.store.Store` (this is a mixin of it).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, and_, bindparam, desc, or_, select

from ..jsonsafe import to_plain as _plain
from . import schema
from .clock import utc_now
from .records import ExperimentStatus

__all__ = ["ExperimentRecords"]

_TRIAL_FIELDS = {"status", "config", "restarts", "iterations", "last_metrics", "checkpoint_uri",
                 "finished_at", "error"}
# built once: a flush runs them as one executemany each (its SET from the rows' keys)
_UPDATE_TRIAL = schema.trials.update().where(schema.trials.c.id == bindparam("record"))
_INSERT_TRIALS = schema.trials.insert().returning(schema.trials.c.id, sort_by_parameter_order=True)


def _shown(row: Any) -> dict[str, Any]:
    """A row as the reading API gives it: its status in the words the CLI and pages use (``completed``, not the
    ``terminated`` the table keeps, as Ray Tune writes it)."""
    data = dict(row)
    if "status" in data:
        data["status"] = ExperimentStatus.shown(data["status"])
    return data


class ExperimentRecords:
    engine: Engine

    def create_experiment(self, name: str, *, kind: str, config: dict[str, Any], storage_path: str | None = None,
                          metric: str | None = None, mode: str | None = None,
                          started_by: tuple[int, str] | None = None) -> int:
        """A new experiment; ``started_by``: the (run id, stage) whose body starts it, if a pipeline stage does."""
        run_id, stage = started_by or (None, None)
        with self.engine.begin() as conn:
            result = conn.execute(schema.experiments.insert().values(
                name=name, kind=kind, status="running", config=_plain(config), storage_path=storage_path,
                metric=metric, mode=mode, created_at=utc_now(), run_id=run_id, stage=stage))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def experiments_of_run(self, run_id: int) -> list[dict[str, Any]]:
        """The experiments the stages of pipeline run ``run_id`` started, oldest first."""
        table = schema.experiments
        query = (select(table.c.id, table.c.name, table.c.kind, table.c.status, table.c.stage, table.c.metric,
                        table.c.created_at).where(table.c.run_id == run_id).order_by(table.c.id))
        with self.engine.begin() as conn:
            return [_shown(row) for row in conn.execute(query).mappings()]

    def finish_experiment(self, experiment_id: int, status: str, *, error: str | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.experiments.update().where(schema.experiments.c.id == experiment_id)
                         .values(status=status, error=error, finished_at=utc_now()))

    def set_experiment_summary(self, experiment_id: int, summary: dict[str, Any]) -> None:
        """What the experiment's run measured (e.g. ``{"prepared_data": {...}}``), kept with its record."""
        with self.engine.begin() as conn:
            conn.execute(schema.experiments.update().where(schema.experiments.c.id == experiment_id)
                         .values(summary=_plain(summary)))

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
        return None if row is None else _shown(row)

    def trial_in(self, folder: str) -> dict[str, Any] | None:
        """The trial that ran in ``folder``: a Tune trial's ``<experiment storage_path>/<trial name>``, or a
        Trainer fit's run folder (its experiment's ``storage_path``); the latest such, None if none did."""
        experiments, trials = schema.experiments, schema.trials
        folder = folder.rstrip("/")
        parent, _, name = folder.rpartition("/")
        query = (select(trials).join(experiments, trials.c.experiment_id == experiments.c.id)
                 .where(or_(and_(experiments.c.kind == "tune", experiments.c.storage_path == parent,
                                 trials.c.name == name),
                            and_(experiments.c.kind == "train", experiments.c.storage_path == folder)))
                 .order_by(desc(trials.c.id)).limit(1))
        with self.engine.begin() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _shown(row)

    def list_experiments(self, *, limit: int = 50) -> list[dict[str, Any]]:
        table = schema.experiments
        with self.engine.begin() as conn:
            rows = conn.execute(select(table).order_by(desc(table.c.id)).limit(limit)).mappings().all()
        return [_shown(r) for r in rows]

    def add_trial(self, experiment_id: int, name: str, *, config: dict[str, Any], status: str = "pending") -> int:
        with self.engine.begin() as conn:
            existing = conn.execute(select(schema.trials.c.id).where(and_(
                schema.trials.c.experiment_id == experiment_id, schema.trials.c.name == name))).scalar()
            if existing is not None:
                return int(existing)
            result = conn.execute(schema.trials.insert().values(
                experiment_id=experiment_id, name=name, status=status, config=_plain(config), restarts=0,
                iterations=0, created_at=utc_now()))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def add_trials(self, experiment_id: int, trials: list[tuple[str, dict[str, Any], str]]) -> list[int]:
        """:meth:`add_trial` for several ``(name, config, status)`` in one transaction (Tune starts trials so);
        a name recorded already keeps its id, and takes this config and status."""
        if not trials:
            return []
        with self.engine.begin() as conn:
            return _insert_trials(conn, experiment_id, trials)

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
                                                            created_at=utc_now()))

    def add_checkpoint(self, trial_id: int, step: int, uri: str, metrics: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.checkpoints.insert().values(trial_id=trial_id, step=step, uri=uri,
                                                            metrics=_plain(metrics), deleted=0, created_at=utc_now()))

    def restart_trial(self, trial_id: int) -> None:
        """A trial starts again from scratch (``Tuner.restore(restart_errored=True)``): its reports are removed
        and its checkpoints marked deleted (their files stay), its status pending."""
        with self.engine.begin() as conn:
            conn.execute(schema.metrics.delete().where(schema.metrics.c.trial_id == trial_id))
            conn.execute(schema.checkpoints.update().where(schema.checkpoints.c.trial_id == trial_id)
                         .values(deleted=1))
            conn.execute(schema.trials.update().where(schema.trials.c.id == trial_id).values(
                status="pending", restarts=0, iterations=0, last_metrics=None, checkpoint_uri=None, error=None,
                finished_at=None))

    def mark_checkpoint_deleted(self, uri: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(schema.checkpoints.update().where(schema.checkpoints.c.uri == uri).values(deleted=1))

    def list_trials(self, experiment_id: int) -> list[dict[str, Any]]:
        table = schema.trials
        with self.engine.begin() as conn:
            rows = conn.execute(select(table).where(table.c.experiment_id == experiment_id)
                                .order_by(table.c.id)).mappings().all()
        return [_shown(r) for r in rows]

    def trial_metrics(self, trial_id: int, *, after: int | None = None,
                      limit: int | None = None) -> list[dict[str, Any]]:
        """A trial's reports by step: all of them, or the first ``limit`` with a step past ``after``."""
        table = schema.metrics
        query = select(table.c.step, table.c["values"]).where(table.c.trial_id == trial_id)
        if after is not None:
            query = query.where(table.c.step > after)
        with self.engine.begin() as conn:
            rows = conn.execute(query.order_by(table.c.step).limit(limit)).all()
        return [{"step": step, **values} for step, values in rows]

    def trial_checkpoints(self, trial_id: int, *, include_deleted: bool = False) -> list[dict[str, Any]]:
        table = schema.checkpoints
        query = select(table).where(table.c.trial_id == trial_id).order_by(table.c.step)
        if not include_deleted:
            query = query.where(table.c.deleted == 0)
        with self.engine.begin() as conn:
            return [dict(r) for r in conn.execute(query).mappings().all()]

    def record_batch(self, metrics_rows: list[tuple[int, int, dict[str, Any]]],
                     trial_updates: dict[int, dict[str, Any]], *,
                     checkpoints: list[tuple[int, int, str, dict[str, Any]]] | None = None,
                     experiment_id: int | None = None,
                     new_trials: list[tuple[str, dict[str, Any], str]] | None = None) -> list[int]:
        """Many reports, trial updates and checkpoints ``(trial_id, step, uri, metrics)`` in one transaction.

        Tune's recorder flushes this way; the same transaction first creates ``new_trials``
        of ``experiment_id`` as :meth:`add_trials` does, and returns their ids.
        """
        for fields in trial_updates.values():
            unknown = set(fields) - _TRIAL_FIELDS
            if unknown:
                raise TypeError(f"record_batch got unknown trial fields {sorted(unknown)}")
        if not (metrics_rows or trial_updates or checkpoints or new_trials):
            return []
        now = utc_now()
        with self.engine.begin() as conn:
            ids = _insert_trials(conn, experiment_id, new_trials) if new_trials and experiment_id is not None else []
            if metrics_rows:
                conn.execute(schema.metrics.insert(), [
                    {"trial_id": t, "step": step, "values": _plain(values), "created_at": now}
                    for t, step, values in metrics_rows])
            _update_trials(conn, trial_updates)
            if checkpoints:  # after the reports they belong to: restore trusts the pair
                conn.execute(schema.checkpoints.insert(), [
                    {"trial_id": t, "step": step, "uri": uri, "metrics": _plain(values), "deleted": 0, "created_at": now}
                    for t, step, uri, values in checkpoints])
        return ids


def _insert_trials(conn: Connection, experiment_id: int, trials: list[tuple[str, dict[str, Any], str]]) -> list[int]:
    """The ids of ``(name, config, status)`` trials of the experiment, created unless a trial of that name is;
    such a record is the trial's again, with this config and status (a Tuner restored after its driver died
    starts a trial whose record its saved state did not know)."""
    names = [name for name, _, _ in trials]
    existing = dict(conn.execute(select(schema.trials.c.name, schema.trials.c.id).where(and_(
        schema.trials.c.experiment_id == experiment_id, schema.trials.c.name.in_(names)))).all())
    again = [{"record": existing[name], "status": status, "config": _plain(config)}
             for name, config, status in trials if name in existing]
    if again:
        conn.execute(_UPDATE_TRIAL, again)
    now = utc_now()
    new: dict[str, dict[str, Any]] = {}
    for name, config, status in trials:
        if name not in existing and name not in new:
            new[name] = {"experiment_id": experiment_id, "name": name, "status": status, "config": _plain(config),
                         "restarts": 0, "iterations": 0, "created_at": now}
    if new:
        created = conn.execute(_INSERT_TRIALS, list(new.values())).scalars().all()
        existing.update(zip(new, created, strict=True))
    return [int(existing[name]) for name in names]


def _update_trials(conn: Connection, updates: dict[int, dict[str, Any]]) -> None:
    """Update trials by id, one executemany per set of fields."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for trial_id, fields in updates.items():
        if fields:
            clean = {k: (_plain(v) if k in ("last_metrics", "config") else v) for k, v in fields.items()}
            groups.setdefault(tuple(sorted(clean)), []).append({"record": trial_id, **clean})
    for rows in groups.values():
        conn.execute(_UPDATE_TRIAL, rows)
