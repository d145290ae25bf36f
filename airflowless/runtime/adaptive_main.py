"""``python -m airflowless.runtime.adaptive_main``: the process behind ``airflowless cluster up --adapt MIN:MAX``.

It hosts the scheduler (on the given host and port) and a ``SpecCluster`` of
worker processes (:class:`~airflowless.runtime.worker_process.WorkerProcess`,
each declaring the given resources) made adaptive between ``--minimum`` and
``--maximum`` by :func:`airflowless.runtime.adaptive.adapt`: workers are added
while ranks, trials or stages wait, and retired when idle. SIGTERM (``airflowless
cluster down``) closes the workers, then the scheduler; the workers also die
with this process (they watch their stdin). With ``--tls DIR`` (a folder of
certificates, :mod:`airflowless.runtime.tls`) the scheduler, each worker it
adds and their dashboards speak TLS and require a certificate from the
cluster's CA, as the embedded cluster of ``init(security=...)`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m airflowless.runtime.adaptive_main")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dashboard-address", required=True)
    parser.add_argument("--minimum", type=int, required=True)
    parser.add_argument("--maximum", type=int, required=True)
    parser.add_argument("--nthreads", type=int, default=1)
    parser.add_argument("--resources", default="", help='"CPU=1 GPU=1"')
    parser.add_argument("--memory-limit", default="auto")
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--tls", default=None, help="a folder of certificates: every port on TLS")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    from distributed import Scheduler, SpecCluster

    from .adaptive import adapt
    from .worker_process import WorkerProcess

    resources = {name: float(amount) for name, _, amount in
                 (part.partition("=") for part in args.resources.split()) if amount}
    worker: dict[str, Any] = {"cls": WorkerProcess, "options": {
        "nthreads": args.nthreads, "resources": resources, "memory_limit": args.memory_limit,
        "host": args.host}}
    scheduler: dict[str, Any] = {"cls": Scheduler, "options": {
        "host": args.host, "port": args.port, "dashboard_address": args.dashboard_address}}
    secured = None
    if args.tls:  # the scheduler on tls://, its dashboard on HTTPS, and each worker given the folder
        from .tls import DriverTLS, load

        secured = DriverTLS(load(args.tls))
        secured.apply(scheduler["options"], [worker["options"]])
    cluster = await SpecCluster(scheduler=scheduler, workers={}, worker=worker, asynchronous=True,
                                silence_logs=logging.WARN, name="airflowless-adaptive",
                                security=secured.security if secured is not None else None)
    from ..dashboard import dask_setup

    dask_setup(cluster.scheduler)  # the control plane, as `cluster up` preloads it on its scheduler
    adaptive = adapt(cluster, minimum=args.minimum, maximum=args.maximum, interval=args.interval)
    await adaptive.announce()  # installs the DemandPlugin: a fit may wait for workers from now on
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    adaptive.stop(reason="cluster down")
    await cluster.close()  # type: ignore[misc]  # a coroutine on an asynchronous cluster
    if secured is not None:
        secured.close()  # the Dask config only: the certificates are the caller's


def main(argv: list[str] | None = None) -> None:
    from .._cloudpickle_internals import keep_code_filenames
    from .._dask_internals import quiet_cancelled_waits

    keep_code_filenames()  # this process's scheduler pickles the tasks again for the workers
    quiet_cancelled_waits()
    asyncio.run(_serve(_parse(argv)))


if __name__ == "__main__":
    main()
