"""The record of serve: one row per deployment of each ``serve.run``, with the process serving it.

Used through :class:`~airflowless.store.store.Store` (this is a mixin of it).
A row is written ``running`` when its application is deployed, and moves on
to ``deleted`` (``serve.delete``), ``replaced`` (the application was deployed
again), or ``stopped`` (``serve.shutdown``, or ``airflowless serve shutdown``).
The replica count is the one at deploy time, or the last one set by the control plane's scale
action (``POST /airflowless/api/v1/deployments/{app}/{deployment}/scale`` rewrites the running rows);
autoscaling does not update it. ``models`` names the registered versions a deployment serves
(``models:/NAME/V``), rewritten when it rolls to another one (a model alias moved).

>>> from airflowless.store import open_store
>>> store = open_store("sqlite://")
>>> row_id = store.record_deployment("taxi", "PredictorDeployment", route_prefix="/", num_replicas=1,
...                                  http_address="http://127.0.0.1:8000", config={}, pid=1234)
>>> store.update_deployment_status("taxi", "stopped", pid=1234)
1
>>> [(d["app"], d["status"]) for d in store.list_deployments()]
[('taxi', 'stopped')]
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, desc, select

from ..errors import ConfigError
from ..jsonsafe import to_plain as _plain
from . import schema
from .clock import aware, utc_now

__all__ = ["DeploymentRecords", "DeploymentStatus", "process_gone"]


class DeploymentStatus:
    RUNNING = "running"
    DELETED = "deleted"
    REPLACED = "replaced"
    STOPPED = "stopped"
    ALL = frozenset({RUNNING, DELETED, REPLACED, STOPPED})


def process_gone(row: dict[str, Any]) -> bool:
    """Whether a ``running`` row's serving process, on this host, is gone (killed, or it exited without
    ``serve.shutdown()``); rows of other hosts cannot be told and count as live."""
    import socket

    from .liveness import alive_since

    return (row["status"] == DeploymentStatus.RUNNING and row["hostname"] == socket.gethostname()
            and not alive_since(row["pid"], row["created_at"]))


class DeploymentRecords:
    engine: Engine

    def record_deployment(self, app: str, deployment: str, *, route_prefix: str | None, num_replicas: int,
                          http_address: str | None, config: dict[str, Any], pid: int | None = None,
                          hostname: str | None = None, status: str = DeploymentStatus.RUNNING,
                          models: list[str] | None = None) -> int:
        """Record one deployment of application ``app`` (state ``running`` by default); return its row id."""
        _check(status)
        now = utc_now()
        with self.engine.begin() as conn:
            result = conn.execute(schema.deployments.insert().values(
                app=app, deployment=deployment, route_prefix=route_prefix, http_address=http_address,
                num_replicas=int(num_replicas), status=status, config=_plain(config), pid=pid,
                hostname=hostname, created_at=now, updated_at=now, models=models or None))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def set_deployment_models(self, app: str, deployment: str, models: list[str], *, pid: int | None = None,
                              hostname: str | None = None) -> int:
        """Say the running rows of ``app``'s ``deployment`` (of process ``pid`` on ``hostname``) serve ``models``
        now; how many rows changed."""
        table = schema.deployments
        query = table.update().where(table.c.app == app, table.c.deployment == deployment,
                                     table.c.status == DeploymentStatus.RUNNING)
        if pid is not None:
            query = query.where(table.c.pid == pid)
        if hostname is not None:
            query = query.where(table.c.hostname == hostname)
        with self.engine.begin() as conn:
            return int(conn.execute(query.values(models=models or None, updated_at=utc_now())).rowcount)

    def model_servers(self, name: str) -> dict[int, list[dict[str, Any]]]:
        """Which running serve deployments serve which version of model ``name``: version -> their rows (those
        whose process is gone left out)."""
        prefix = f"models:/{name}/"
        served: dict[int, list[dict[str, Any]]] = {}
        for row in self.list_deployments(status=DeploymentStatus.RUNNING, limit=10_000):
            for uri in row.get("models") or []:
                if uri.startswith(prefix) and uri[len(prefix):].isdigit() and not process_gone(row):
                    served.setdefault(int(uri[len(prefix):]), []).append(row)
        return served

    def update_deployment_status(self, app: str, status: str, *, pid: int | None = None,
                                 hostname: str | None = None) -> int:
        """Move the ``running`` rows of ``app`` (of process ``pid`` on ``hostname``, if given) to ``status``.

        Rows already ended keep their state. Returns how many rows changed.
        """
        _check(status)
        table = schema.deployments
        query = table.update().where(table.c.app == app, table.c.status == DeploymentStatus.RUNNING)
        if pid is not None:
            query = query.where(table.c.pid == pid)
        if hostname is not None:
            query = query.where(table.c.hostname == hostname)
        with self.engine.begin() as conn:
            return int(conn.execute(query.values(status=status, updated_at=utc_now())).rowcount)

    def list_deployments(self, *, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The latest deployment rows first (only those in ``status`` if given); times in UTC."""

        table = schema.deployments
        query = select(table).order_by(desc(table.c.id)).limit(limit)
        if status is not None:
            query = query.where(table.c.status == status)
        with self.engine.begin() as conn:
            rows = [dict(r) for r in conn.execute(query).mappings().all()]
        for row in rows:
            row["created_at"], row["updated_at"] = aware(row["created_at"]), aware(row["updated_at"])
        return rows


def _check(status: str) -> None:
    if status not in DeploymentStatus.ALL:
        raise ConfigError(f"a deployment's status is one of {sorted(DeploymentStatus.ALL)}, got {status!r}")
