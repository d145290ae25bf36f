"""The driver the service starts for one queued run: ``python -m airflowless.service.driver RUN_ID``.

It runs in a process of its own (a pipeline that crashes, hangs or eats memory
never takes the service down), with the service's record and cluster in its
environment (``AIRFLOWLESS_DB``, ``AIRFLOWLESS_ADDRESS``; without an address
it starts an embedded cluster of its own). It loads the run's pipeline, adds
the run's data interval to its parameters where the pipeline declares
``interval_start`` / ``interval_end`` (and the run it follows where it declares
``upstream_run_id``, and what a file trigger matched, parsed to the parameters' types), takes the queued run (a compare-and-set:
a second driver for the same run stops there) and runs it like
``airflowless run``, its stages' progress on stdout, which the service keeps as
the run's log. A module that no longer loads, or parameters it no longer takes,
fail the run with the error, and mark its deployment broken.

A *warm* driver (``python -m airflowless.service.driver --wait``) is started by
the service before there is a run for it: it imports what a driver needs, then
waits for one line on its standard input, ``RUN_ID LOG_PATH``, sends its output
to that log and drives the run (a run's start no longer waits for a Python
process to start and import). An end of input (the service stopped or died)
ends it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

__all__ = ["main"]


def _progress(node: str, what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {node}: {what}", flush=True)


def _warm_up() -> None:
    """Import what driving a run needs, before there is one."""
    import distributed  # noqa: F401

    import airflowless.dag.runner  # noqa: F401
    import airflowless.data  # noqa: F401  (most pipelines read data)
    import airflowless.runtime  # noqa: F401
    import airflowless.store  # noqa: F401


def _wait_for_run() -> list[str] | None:
    """Wait for the service's ``RUN_ID LOG_PATH``; send this process's output to that log; ``[RUN_ID]``."""
    line = sys.stdin.readline()
    if not line.strip():
        return None  # the service went away before it had a run for this driver
    run_id, log = line.split(maxsplit=1)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log.strip(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return [run_id]


def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    warm = argv == ["--wait"]
    if warm:
        _warm_up()
        chosen = _wait_for_run()
        if chosen is None:
            return 0
        argv = chosen
    return _drive(argv, warm)


def _drive(argv: list[str], warm: bool) -> int:
    from ..dag import load_pipeline
    from ..dag.params import bind_params
    from ..errors import ResumeError
    from ..runtime import init, shutdown
    from ..settings import get_settings
    from ..store import open_store
    from .files import typed
    from .schedules import INTERVAL_PARAMS, UPSTREAM_PARAM
    from .upload import local_target

    (run_id,) = [int(arg) for arg in argv]
    store = open_store()
    run = store.get_run(run_id)
    how = " (warm: started before the run)" if warm else ""
    print(f"driver of run {run_id} ({run.pipeline}, {run.trigger}) on pid {os.getpid()}{how}", flush=True)
    try:
        pipe = load_pipeline(local_target(run.target or run.module))
        params: dict[str, Any] = dict(run.params)
        for name, moment in zip(INTERVAL_PARAMS, (run.interval_start, run.interval_end), strict=True):
            if name in pipe.params and moment is not None:
                params[name] = moment.isoformat()
        if UPSTREAM_PARAM in pipe.params and run.upstream_run is not None:
            params[UPSTREAM_PARAM] = run.upstream_run
        if run.trigger in ("files", "after") and run.deployment_id is not None:  # what the trigger set, as text
            names = store.trigger_text_params(run.deployment_id)
            params.update(typed({name: params[name] for name in names if name in params and name in pipe.params},
                                pipe.params))
        bind_params(pipe.name, pipe.params, params)
        pipe.graph(**params)
    except Exception as exc:
        error = f"the service could not start run {run_id}: {type(exc).__name__}: {exc}"
        print(error, file=sys.stderr, flush=True)
        store.fail_queued_run(run_id, error)
        if run.deployment_id is not None:  # its next runs would fail the same way: the page says why
            store.mark_deployment_broken(run.deployment_id, error)
        return 2
    client = init(get_settings().address, quiet=True)
    resume = run.resumed_from if run.trigger == "resume" else None  # what the dead run finished is reused
    try:
        result = pipe.run(params, client=client, store=store, queued_run=run_id, raise_on_failure=False,
                          progress=_progress, resume=resume)
    except ResumeError as exc:  # cancelled while queued, or another driver took it
        print(f"not started: {exc}", file=sys.stderr, flush=True)
        return 3
    finally:
        shutdown()
    print(f"run {run_id} {result.status}", flush=True)
    for stage in result.record.stages:
        if stage.status == "failed":
            print(f"--- stage {stage.node} failed ---\n{stage.traceback or stage.error}", file=sys.stderr, flush=True)
    return 0 if result.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
