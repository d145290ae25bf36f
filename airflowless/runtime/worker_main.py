"""One embedded-cluster worker process: ``python -m airflowless.runtime.worker_main SPEC``.

Started by :class:`airflowless.runtime.worker_process.WorkerProcess` as
``python -P -m`` (never by ``multiprocessing``), so the folder it starts in is
not put first on ``sys.path`` (:mod:`airflowless.runtime.launch` says why): this module is the process's ``__main__``, so the user's
script is never imported here (a script without an ``if __name__ ==
"__main__":`` guard works, and its top-level imports cost the worker nothing).
Functions defined in the script still arrive by value (cloudpickle pickles
``__main__`` functions by value).

SPEC is a JSON object: ``scheduler`` (address), ``worker`` (keyword arguments
of ``distributed.Worker``), ``sys_path`` (the driver's: its entries
follow this process's own, so they add the user's modules without shadowing a
standard or installed one), ``ready_fd`` (a pipe
the worker's address is written to once it is registered), ``silence_logs``
(a logging level for ``distributed``) and ``tls`` (a folder of certificates,
or null: see :mod:`airflowless.runtime.tls`).

The driver holds the write end of this process's stdin. When it closes —
whatever ends the driver, SIGKILL included — the process kills its own
process group (it leads a session: itself and whatever its tasks started).
SIGTERM or SIGINT close the worker gracefully; the process then ends with
``os._exit`` (see the end of :func:`main`).

Once registered, the worker imports pyarrow's dataset reader and pandas in a
background thread (:data:`WARM_IMPORTS`), while it has no work yet;
``AIRFLOWLESS_WARM_WORKERS=0`` leaves that to the first task that reads.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any


def _exit_with_driver() -> None:
    """Kill this process (and its group, when it leads one) once stdin reaches end of file."""

    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="airflowless-driver-watch", daemon=True).start()


def _closing_heartbeat_filter(worker: Any) -> Callable[[logging.LogRecord], bool]:
    """A filter that drops a heartbeat's failure logged while ``worker`` closes.

    A heartbeat still in flight when the worker closes its connections fails
    with ``CommClosedError``, and distributed logs that with a traceback, on
    the user's console as their script ends; nothing is wrong then.
    """
    from distributed.core import Status

    closing = {Status.closing, Status.closed, Status.failed}  # not closing_gracefully: it still talks

    def keep(record: logging.LogRecord) -> bool:
        return not (worker.status in closing and str(record.msg).startswith("Failed to communicate with "
                                                                             "scheduler during heartbeat"))

    return keep


WARM_IMPORTS = ("pyarrow.dataset",)  # and with it pyarrow, its compute functions and pandas


def _start_warm_imports() -> None:
    """Import pyarrow's dataset reader, and with it pandas, in a thread while the worker waits for work (0.2-0.3 s
    of a fresh process's first read, measured on W1's cold pass).

    Only other packages' modules: the loop thread imports airflowless's own as it unpickles tasks, and those
    import each other, so a second thread importing them at the same time made the loop thread meet a half-made
    module or Python's import deadlock error. A task that forks meanwhile (multiprocessing, a DataLoader) waits
    for the imports to end: a child forked mid-import inherits a module lock held by a thread it does not have,
    and hangs on that import.
    """
    import importlib

    done = threading.Event()

    def warm() -> None:
        try:
            for name in WARM_IMPORTS:
                try:
                    importlib.import_module(name)
                except ImportError as exc:  # a first task that needs it says so itself
                    logging.getLogger(__name__).debug("worker: not importing %s ahead (%s)", name, exc)
        finally:
            done.set()

    thread = threading.Thread(target=warm, name="airflowless-warm-imports", daemon=True)
    thread.start()
    os.register_at_fork(before=lambda: threading.current_thread() is thread or done.wait(30),
                        after_in_child=done.set)  # the child has no such thread to wait for


def main(argv: list[str]) -> None:
    """Run one worker as SPEC (``argv[1]``) says, until the scheduler or a signal closes it."""
    _exit_with_driver()  # first, before the slow imports: a driver dying now still ends us
    import asyncio
    import json

    spec = json.loads(argv[1])
    sys.path.extend(entry for entry in spec["sys_path"] if entry not in sys.path)

    from distributed import Worker
    from distributed.utils import silence_logging_cmgr

    from airflowless._dask_internals import require_http_client_certificates, wait_for_signals
    from airflowless.settings import switched_on

    options = dict(spec["worker"])
    if spec.get("tls"):
        import dask.config

        from airflowless.runtime import tls

        files = tls.load(spec["tls"])
        options["security"] = files.security()
        dask.config.set(tls.dashboard_config(files, "worker"))

    async def run() -> None:
        worker = await Worker(spec["scheduler"], **options)
        logging.getLogger("distributed.worker").addFilter(_closing_heartbeat_filter(worker))
        require_http_client_certificates(worker)
        with os.fdopen(spec["ready_fd"], "w") as ready:
            ready.write(f"{worker.address}\n")
        if switched_on("AIRFLOWLESS_WARM_WORKERS"):  # read alone: a bad other setting must not end the worker
            _start_warm_imports()
        signals = asyncio.ensure_future(wait_for_signals())
        finished = asyncio.ensure_future(worker.finished())
        await asyncio.wait([signals, finished], return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():
            await worker.close(reason="airflowless: the driver stopped this worker")
        signals.cancel()

    with silence_logging_cmgr(spec["silence_logs"]):
        asyncio.run(run())
    # The worker is closed: end now, without the interpreter's and the C++ libraries' exit code. A framework
    # thread still alive (XGBoost's, gloo's) makes libstdc++ abort with "terminate called without an active
    # exception" while static objects are destroyed, on the driver's console after a Ctrl-C.
    handoff = sys.modules.get("airflowless.data.execution.handoff")  # imported where a task iterated a Dataset
    if handoff is not None:
        handoff.close_inbox()  # os._exit runs no exit handler: its inbox would wait for the next sweep
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
