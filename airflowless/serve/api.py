"""The public serve functions: ``start``, ``run``, ``status``, ``delete``, ``shutdown``, ``get_app_handle``.

>>> from airflowless import serve
>>> @serve.deployment
... def hello(body):
...     return {"hello": body["name"]}
>>> handle = serve.run(hello.bind(), name="hello", route_prefix="/hello")   # doctest: +SKIP
>>> handle.remote({"name": "dask"}).result()                              # doctest: +SKIP
{'hello': 'dask'}
>>> serve.shutdown()                                                       # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import ssl
import time
from typing import Any

from ..errors import ConfigError
from .application import Application, flatten
from .context import current_runtime, start_runtime, stop_runtime
from .driver import ServeRuntime
from .errors import DeploymentNotFoundError
from .handle import DeploymentHandle
from .http_options import HTTPOptions
from .records import record_run, record_status, served_models
from .status import ServeStatus

__all__ = ["start", "run", "status", "delete", "shutdown", "get_app_handle", "http_address", "http_client_ssl"]


def start(*, http_options: dict[str, Any] | None = None) -> None:
    """Start serve (the controller and the HTTP proxy) in this process; ``serve.run`` does it too.

    ``http_options``: ``{"host": "127.0.0.1", "port": 8000}`` (port 0 picks a free one) and the
    proxy's limits, e.g. ``{"limit_concurrency": 512, "body_timeout_s": 30.0}``: see
    :class:`~airflowless.serve.http_options.HTTPOptions` for every key and its default.
    """
    options = HTTPOptions.from_dict(http_options)
    runtime = current_runtime()
    if runtime is not None:
        running = dataclasses.replace(runtime.http_options, port=runtime.port)
        differ = sorted(key for key, value in (http_options or {}).items()
                        if getattr(running, key) != value and not (key == "port" and value == 0))
        if differ:
            raise ConfigError(f"serve is already running on {runtime.host}:{runtime.port} with other http_options "
                              f"({', '.join(f'{k}={getattr(running, k)!r}' for k in differ)}); call "
                              "serve.shutdown() before starting it with new ones")
        return
    start_runtime(lambda: ServeRuntime.on_current_cluster(options))


def http_address() -> str:
    """``http://host:port`` of the running proxy (``https://`` when it serves HTTPS)."""
    runtime = _runtime()
    return f"{runtime.scheme}://{runtime.host}:{runtime.port}"


def http_client_ssl() -> ssl.SSLContext | None:
    """How this process calls the proxy over HTTPS when the cluster runs on TLS, else None.

    An ``ssl.SSLContext`` trusting the cluster's CA and showing this
    process's certificate (the proxy then requires one), for ``httpx``'s
    ``verify=``: ``httpx.post(url, json=body, verify=serve.http_client_ssl() or True)``.
    """
    from ..runtime.tls import client_context

    return client_context(_runtime().security)


def run(app: Application, *, name: str = "default", route_prefix: str | None = "/",
        timeout_s: float = 300.0, blocking: bool = False) -> DeploymentHandle:
    """Deploy ``app`` (replacing an application of the same name); return a handle to its ingress.

    An application of the same name and deployments is updated in place, without a failed request: each
    deployment's replicas are replaced one at a time by new ones that passed their start (``max_surge``
    at once), old ones drained; if the new version's replicas cannot start, it is rolled back (the old
    version serving on) and ``ServeError`` says why.

    Waits until every deployment has its replicas running; raises ``ServeError``
    with the replica's error if one cannot start. ``route_prefix=None`` serves
    the application to handles only. Each deployment is recorded in the store
    (see :mod:`.records`); a store that fails is logged, never raised.

    ``blocking=True`` (Ray's): then serve until Ctrl-C, and shut serve down (a script that only serves).
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"an application name must be a non-empty string without '/', got {name!r}")
    if route_prefix is not None and (not isinstance(route_prefix, str) or not route_prefix.startswith("/")
                                     or route_prefix.startswith("/-/")
                                     or (route_prefix != "/" and route_prefix.endswith("/"))):
        raise ConfigError(f"route_prefix must start with '/', not end with '/' and not start with '/-/', "
                          f"got {route_prefix!r}")
    flat = flatten(app, app_name=name)
    start()
    runtime = _runtime()
    replacing = name in runtime.apps
    try:
        runtime.call(runtime.deploy(name, route_prefix, flat, timeout=timeout_s))
    except BaseException:
        if replacing and name not in runtime.apps:  # taken down before the new one failed (a rolled-back
            record_status([name], "deleted")  # update keeps the old version serving)
        raise
    running = status().get(name, {}).get("deployments", {})
    record_run(name, route_prefix, http_address(), [
        (d.name, d.config, int(running.get(d.name, {}).get("running_replicas", d.config.initial_replicas)),
         served_models(args, kwargs)) for d, args, kwargs in flat])
    handle = DeploymentHandle(name, flat[-1][0].name)
    if blocking:
        _serve_until_interrupted(name)
    return handle


def _serve_until_interrupted(name: str) -> None:
    print(f"serving application {name!r} at {http_address()} until Ctrl-C", flush=True)
    try:
        while current_runtime() is not None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("Ctrl-C: shutting serve down", flush=True)
    shutdown()


def status() -> ServeStatus:
    """Each application's status and its deployments', as Ray's ``ServeStatus`` (:mod:`.status`):
    ``serve.status().applications["app"].deployments["Model"].status``, or the same as dict keys."""
    runtime = current_runtime()
    if runtime is None:
        return ServeStatus()
    return runtime.call(_async(runtime.status))  # type: ignore[no-any-return]


async def _async(fn: Any) -> Any:
    return fn()


def delete(name: str) -> None:
    """Stop an application's replicas (draining them) and remove its route."""
    runtime = _runtime()
    runtime.call(runtime.delete(name))
    record_status([name], "deleted")


def get_app_handle(name: str) -> DeploymentHandle:
    """A handle to the ingress deployment of a running application."""
    runtime = _runtime()
    app = runtime.apps.get(name)
    if app is None:
        raise DeploymentNotFoundError(f"no application {name!r} is running; running: {sorted(runtime.apps)}")
    return DeploymentHandle(name, app.ingress[1])


def shutdown() -> None:
    """Delete every application, stop the HTTP proxy and the serve thread. The Dask cluster stays up."""
    runtime = current_runtime()
    apps = sorted(runtime.apps) if runtime is not None else []
    stop_runtime()
    record_status(apps, "stopped")


def _runtime() -> Any:
    runtime = current_runtime()
    if runtime is None:
        raise DeploymentNotFoundError("serve is not running; call serve.run(app) first")
    return runtime
