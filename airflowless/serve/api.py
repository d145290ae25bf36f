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

from typing import Any

from ..errors import ConfigError
from .adapter import current_runtime, start_runtime, stop_runtime
from .application import Application, flatten
from .errors import DeploymentNotFoundError
from .handle import DeploymentHandle
from .records import record_run, record_status

__all__ = ["start", "run", "status", "delete", "shutdown", "get_app_handle", "http_address"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def start(*, http_options: dict[str, Any] | None = None) -> None:
    """Start serve (the controller and the HTTP proxy) in this process; ``serve.run`` does it too.

    ``http_options``: ``{"host": "127.0.0.1", "port": 8000}`` (port 0 picks a free one).
    """
    options = dict(http_options or {})
    unknown = set(options) - {"host", "port"}
    if unknown:
        raise ConfigError(f"unknown http_options {sorted(unknown)}; expected 'host' and/or 'port'")
    port = options.get("port", DEFAULT_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise ConfigError(f"http_options['port'] must be an int in [0, 65535], got {port!r}")
    runtime = current_runtime()
    if runtime is not None:
        if options and (options.get("host", runtime.host), port) != (runtime.host, runtime.port) and port != 0:
            raise ConfigError(f"serve is already running on {runtime.host}:{runtime.port}; call serve.shutdown() "
                              "before starting it with other http_options")
        return
    start_runtime(host=str(options.get("host", DEFAULT_HOST)), port=port)


def http_address() -> str:
    """``http://host:port`` of the running proxy."""
    runtime = _runtime()
    return f"http://{runtime.host}:{runtime.port}"


def run(app: Application, *, name: str = "default", route_prefix: str | None = "/",
        timeout_s: float = 300.0) -> DeploymentHandle:
    """Deploy ``app`` (replacing an application of the same name); return a handle to its ingress.

    Waits until every deployment has its replicas running; raises ``ServeError``
    with the replica's error if one cannot start. ``route_prefix=None`` serves
    the application to handles only. Each deployment is recorded in the store
    (see :mod:`.records`); a store that fails is logged, never raised.
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
        if replacing:  # the running version was taken down before the new one failed
            record_status([name], "deleted")
        raise
    running = status().get(name, {}).get("deployments", {})
    record_run(name, route_prefix, http_address(), [
        (d.name, d.config, int(running.get(d.name, {}).get("running_replicas", d.config.initial_replicas)))
        for d, _, _ in flat])
    return DeploymentHandle(name, flat[-1][0].name)


def status() -> dict[str, Any]:
    """``{app: {"status", "route_prefix", "deployments": {name: {"status", "running_replicas", ...}}}}``."""
    runtime = current_runtime()
    if runtime is None:
        return {}
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
