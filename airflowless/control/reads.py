"""The record as JSON: what the API's GET routes answer, as plain functions of a store.

No HTTP here: each function takes an opened :class:`~airflowless.store.Store`
and returns a JSON-able dict, or raises :class:`~.errors.NotFound`. The API
runs them in a thread (the store blocks); the pages may call them too.

>>> from airflowless.store import open_store
>>> store = open_store("sqlite://")
>>> run_id = store.create_run("taxi", module="pipelines.taxi", params={"n": 1})
>>> [run["status"] for run in runs(store, limit=10)["runs"]]
['running']
>>> run(store, 99)
Traceback (most recent call last):
...
airflowless.control.errors.NotFound: no run with id 99 in this record
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from ..jsonsafe import to_plain
from ..store.records import ExperimentStatus, RunRecord, StageRecord, StageStatus
from .errors import NotFound

__all__ = ["checkpoints", "deployments", "experiment", "experiment_metrics", "experiments", "metrics", "run", "runs",
           "run_log", "run_summary", "trial", "plain"]

LOG_PAGE_BYTES = 512 * 1024  # the most of a log one answer carries


def plain(value: Any) -> Any:
    """``value`` as JSON takes it: times as ISO 8601 text, numpy scalars as numbers, NaN as null."""
    if isinstance(value, datetime):  # the store writes UTC; SQLite hands it back without a zone
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return to_plain(value)


def runs(store: Any, *, limit: int) -> dict[str, Any]:
    """The latest runs, newest first, without their stages."""
    return {"runs": [run_summary(record) for record in store.list_runs(limit=limit)]}


def run(store: Any, run_id: int) -> dict[str, Any]:
    """One run with its stages: state, attempts, duration, cache hit, error and traceback."""
    try:
        record = store.get_run(run_id)
    except KeyError:
        raise NotFound(f"no run with id {run_id} in this record") from None
    return {**run_summary(record), "stages": [_stage(stage) for stage in record.stages],
            "notifications": plain(store.notifications_of(run_id)),
            "experiments": [_experiment(row) for row in store.experiments_of_run(run_id)]}


def run_log(store: Any, run_id: int, node: str | None, *, attempt: int | None = None, offset: int = 0) -> dict[str, Any]:
    """A page of what stage ``node`` of run ``run_id`` printed and logged in ``attempt`` (default: its latest),
    from byte ``offset``; with ``node`` None, its service driver's output (the service's copy). Ask for the
    rest from ``next_offset``; ``done``: nothing more will come once a page is empty (the attempt has ended:
    an earlier one, or the latest of a stage that ended; a driver's copy that the service closed)."""
    from ..dag.logs import attempt_logs, read_log
    from ..service.driver_logs import END_MARK, whole

    try:
        record = store.get_run(run_id)
    except KeyError:
        raise NotFound(f"no run with id {run_id} in this record") from None
    if node is None:
        if not record.driver_log_uri:
            raise NotFound(f"run {run_id} has no driver log (only runs the service starts do); its stages' logs "
                           f"are at runs/{run_id}/logs/STAGE")
        uris, settled = [(1, record.driver_log_uri)], False  # whole once the service closed the copy (below)
    else:
        try:
            stage = record.stage(node)
        except KeyError as exc:
            raise NotFound(exc.args[0]) from None
        uris, settled = attempt_logs(node, stage.log_uri, stage.attempts), stage.status not in StageStatus.UNSETTLED
    attempts = len(uris)
    chosen = attempts if attempt is None else attempt
    if not uris:
        return {"run_id": run_id, "stage": node, "attempt": None, "attempts": 0, "offset": offset,
                "next_offset": offset, "text": "", "done": settled}
    if not 1 <= chosen <= attempts:
        raise NotFound(f"stage {node!r} of run {run_id} has attempts 1 to {attempts}, not {chosen}")
    back = min(offset, len(END_MARK)) if node is None else 0  # the end mark may lie before the offset
    raw = read_log(uris[chosen - 1][1], offset - back)
    data = raw[back:back + LOG_PAGE_BYTES]
    to_end = len(data) == len(raw) - back  # this page reaches the log's end as it is now
    if node is None:  # closed by the service, or never to be (its run ended long ago)
        settled = to_end and whole(raw, record.finished_at)
    if not ((to_end and settled) or chosen < attempts):  # a character cut by the page's (or the file's) end
        data = data[:len(data) - _incomplete_tail(data)]  # comes whole next time
    text = data.decode("utf-8", "replace")
    return {"run_id": run_id, "stage": node, "attempt": chosen, "attempts": attempts, "offset": offset,
            "next_offset": offset + len(data), "text": text, "done": settled or chosen < attempts}


def _incomplete_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` begin a UTF-8 character that is not whole there.

    >>> _incomplete_tail("é".encode()[:1]), _incomplete_tail("aé".encode()), _incomplete_tail("€".encode()[:2])
    (1, 0, 2)
    """
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: its lead is further back
            continue
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return back if need > back else 0
    return 0


def run_summary(record: RunRecord) -> dict[str, Any]:
    data = asdict(record)
    data.pop("stages")
    data.pop("driver_started")
    return plain({**data, "duration_s": record.duration_s})


def _stage(record: StageRecord) -> dict[str, Any]:
    data = asdict(record)
    data.pop("run_id")
    cache_hit = record.status == StageStatus.CACHED or record.reused_from_run is not None
    return plain({**data, "cache_hit": cache_hit})


def experiments(store: Any, *, limit: int) -> dict[str, Any]:
    """The latest experiments, newest first, each with its trial count by status."""
    from sqlalchemy import func, select

    from ..store import schema

    rows = store.list_experiments(limit=limit)
    table = schema.trials
    counts: dict[int, dict[str, int]] = {row["id"]: {} for row in rows}
    if counts:
        query = (select(table.c.experiment_id, table.c.status, func.count())
                 .where(table.c.experiment_id.in_(list(counts)))
                 .group_by(table.c.experiment_id, table.c.status))
        with store.engine.begin() as conn:
            for experiment_id, status, count in conn.execute(query).all():
                shown = ExperimentStatus.shown(status)
                counts[experiment_id][shown] = counts[experiment_id].get(shown, 0) + int(count)
    return {"experiments": [{**_experiment(row), "trials": counts[row["id"]]} for row in rows]}


def experiment(store: Any, experiment_id: int) -> dict[str, Any]:
    """One experiment with its trials (config, status, last metrics)."""
    row = store.find_experiment(experiment_id)
    if row is None:
        raise NotFound(f"no experiment with id {experiment_id} in this record")
    return {**_experiment(row), "trials": [_trial(t) for t in store.list_trials(experiment_id)]}


def _experiment(row: dict[str, Any]) -> dict[str, Any]:
    return plain({**row, "status": ExperimentStatus.shown(row["status"])})


METRIC_ROWS = 10_000
"""The most reports one metrics read answers with (and its default ``limit``); ``next`` pages on."""


def trial(store: Any, trial_id: int) -> dict[str, Any]:
    """One trial: its experiment, config, status, iterations, restarts, last metrics, checkpoint."""
    return _trial(_trial_row(store, trial_id))


def _trial_row(store: Any, trial_id: int) -> dict[str, Any]:
    from sqlalchemy import select

    from ..store import schema

    with store.engine.begin() as conn:
        row = conn.execute(select(schema.trials).where(schema.trials.c.id == trial_id)).mappings().first()
    if row is None:
        raise NotFound(f"no trial with id {trial_id} in this record")
    return dict(row)


def _trial(row: dict[str, Any]) -> dict[str, Any]:
    return plain({**row, "status": ExperimentStatus.shown(row["status"])})


def metrics(store: Any, trial_id: int, *, names: list[str], after: int | None = None,
            limit: int = METRIC_ROWS) -> dict[str, Any]:
    """A page of a trial's reports by step (only the metrics ``names``, if any), and the metric names on it.

    At most ``limit`` reports with a step past ``after``; ``next`` is the ``after`` of the next page
    (None on the last one).
    """
    _trial_row(store, trial_id)
    rows = store.trial_metrics(trial_id, after=after, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return plain({"trial_id": trial_id, "names": _reported(rows), "metrics": _only(rows, names),
                  "next": rows[-1]["step"] if more else None})


def experiment_metrics(store: Any, experiment_id: int, *, trial_ids: list[int], names: list[str],
                       after: tuple[int, int] | None = None, limit: int = METRIC_ROWS) -> dict[str, Any]:
    """A page of the reports by step of many trials of one experiment, in one read (a page's learning curves).

    Every trial of the experiment, or only those of ``trial_ids`` that are in it;
    each with its reports (only the metrics ``names``, if any); ``names`` lists
    every metric name on the page. Reports go by trial, then step: at most
    ``limit`` of them past ``after`` (a trial id and a step); ``next`` is where
    the next page starts, as ``"trial:step"`` (None on the last one). The first
    page lists every chosen trial, those without reports too.
    """
    from sqlalchemy import and_, or_, select

    from ..store import schema

    if store.find_experiment(experiment_id) is None:
        raise NotFound(f"no experiment with id {experiment_id} in this record")
    trials, reports = schema.trials, schema.metrics
    chosen = select(trials.c.id).where(trials.c.experiment_id == experiment_id)
    if trial_ids:
        chosen = chosen.where(trials.c.id.in_(trial_ids))
    query = (select(reports.c.trial_id, reports.c.step, reports.c["values"])
             .where(reports.c.trial_id.in_(chosen.scalar_subquery())))
    if after is not None:
        query = query.where(or_(reports.c.trial_id > after[0],
                                and_(reports.c.trial_id == after[0], reports.c.step > after[1])))
    query = query.order_by(reports.c.trial_id, reports.c.step).limit(limit + 1)
    with store.engine.begin() as conn:
        by_trial: dict[int, list[dict[str, Any]]] = (
            {row[0]: [] for row in conn.execute(chosen.order_by(trials.c.id))} if after is None else {})
        rows = conn.execute(query).all()
    for trial_id, step, values in rows[:limit]:
        by_trial.setdefault(trial_id, []).append({"step": step, **values})
    last = rows[limit - 1] if len(rows) > limit else None
    every = [report for kept in by_trial.values() for report in kept]
    return plain({"experiment_id": experiment_id, "names": _reported(every),
                  "trials": [{"trial_id": t, "metrics": _only(kept, names)} for t, kept in by_trial.items()],
                  "next": f"{last[0]}:{last[1]}" if last is not None else None})


def _reported(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({key for row in rows for key in row if key != "step"})


def _only(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """``rows`` with only the metrics ``names`` (all when empty); steps left with none are dropped."""
    if not names:
        return rows
    wanted = set(names)
    kept = [{"step": row["step"], **{k: v for k, v in row.items() if k in wanted}} for row in rows]
    return [row for row in kept if len(row) > 1]


def checkpoints(store: Any, trial_id: int) -> dict[str, Any]:
    """A trial's kept checkpoints by step."""
    _trial_row(store, trial_id)
    kept = [{k: v for k, v in row.items() if k not in ("id", "deleted", "trial_id")}
            for row in store.trial_checkpoints(trial_id)]
    return plain({"trial_id": trial_id, "checkpoints": kept})


def deployments(store: Any, *, limit: int, status: str | None) -> dict[str, Any]:
    """The latest deployment rows of serve, newest first.

    A ``running`` row whose serving process on this host is gone (killed, or it
    exited without ``serve.shutdown()``) reads as ``stopped``, with
    ``"process": "gone"``: its replicas stop themselves once their lease lapses.
    """
    from ..store.deployments import process_gone

    def settled(row: dict[str, Any]) -> dict[str, Any]:
        return {**row, "status": "stopped", "process": "gone"} if process_gone(row) else row

    if status in (None, "running"):
        rows = [settled(r) for r in store.list_deployments(status=status, limit=limit)]
        rows = [r for r in rows if status is None or r["status"] == status]
    else:
        rows = store.list_deployments(status=status, limit=limit)
        if status == "stopped":  # and those whose process is gone
            gone = [r for r in map(settled, store.list_deployments(status="running", limit=limit))
                    if r["status"] == "stopped"]
            rows = sorted([*rows, *gone], key=lambda r: r["id"], reverse=True)[:limit]
    return {"deployments": plain(rows)}
