"""Serve's lines in the store: each deployment of a ``serve.run``, and what became of it.

``serve.run`` records every deployment of the application (``running``, with
its replica count, options, the proxy's address and this process's pid);
``serve.delete`` marks them ``deleted``, a second ``serve.run`` of the same
name ``replaced``, ``serve.shutdown`` ``stopped``. Each row names the
registered model versions its deployment serves (:func:`served_models`),
rewritten when it rolls to another (:func:`record_models`). Writing the record never
breaks serving: a store that cannot be opened or written is logged (logger
``airflowless.serve.records``) and serving goes on.

>>> record_status(["taxi"], "stopped")   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

__all__ = ["record_run", "record_status", "record_models", "served_models"]

log = logging.getLogger(__name__)


def _write(what: str, write: Callable[[Any], None]) -> None:
    """Open the store, ``write(store)``, close it; log and go on if any of it fails."""
    store = None
    try:
        from ..store import open_store

        store = open_store()
        write(store)
    except Exception as exc:
        log.warning("serve could not record %s in the store (serving goes on): %s: %s",
                    what, type(exc).__name__, exc)
    finally:
        if store is not None:
            store.close()


def served_models(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """The registered versions (``models:/NAME/V``) among a deployment's arguments."""
    from ..train.checkpoint import Checkpoint

    return sorted({value.model_version for value in (*args, *kwargs.values())
                   if isinstance(value, Checkpoint) and value.model_version})


def record_run(app: str, route_prefix: str | None, http_address: str | None,
               deployments: list[tuple[str, Any, int, list[str]]]) -> None:
    """Record the deployments ``(name, DeploymentConfig, running replicas, model versions served)`` of
    application ``app``."""
    pid, host = os.getpid(), socket.gethostname()

    def write(store: Any) -> None:
        store.update_deployment_status(app, "replaced", pid=pid, hostname=host)
        for name, config, replicas, models in deployments:
            store.record_deployment(app, name, route_prefix=route_prefix, http_address=http_address,
                                    num_replicas=replicas, config=dataclasses.asdict(config), pid=pid,
                                    hostname=host, models=models)

    _write(f"application {app!r}", write)


def record_models(app: str, models: dict[str, list[str]]) -> None:
    """Record that ``app``'s deployments serve these model versions now (after a roll)."""
    pid, host = os.getpid(), socket.gethostname()

    def write(store: Any) -> None:
        for deployment, served in models.items():
            store.set_deployment_models(app, deployment, served, pid=pid, hostname=host)

    _write(f"the models application {app!r} serves", write)


def record_status(apps: list[str], status: str) -> None:
    """Mark the running rows of these applications, served by this process, ``status``."""
    if not apps:
        return
    pid, host = os.getpid(), socket.gethostname()

    def write(store: Any) -> None:
        for app in apps:
            store.update_deployment_status(app, status, pid=pid, hostname=host)

    _write(f"applications {apps} as {status}", write)
