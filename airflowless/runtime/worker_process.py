"""A worker of the embedded cluster in a process of its own, started and watched by the driver.

distributed's ``Nanny`` starts a worker with ``multiprocessing`` (spawn), which
imports the driver's ``__main__`` again in the worker: a script that calls
``airflowless.init()`` at its top level would start clusters without end. So
the embedded cluster's workers are ``python -m airflowless.runtime.worker_main``
processes instead (see that module), and :class:`WorkerProcess` is the
driver's side of one, as a ``SpecCluster`` worker class:

- ``start`` launches the process and returns once its worker has registered
  with the scheduler (the worker writes its address to a pipe);
- a worker process that exits while the cluster runs (a task crashed it, it was
  killed) is started again under the same name, as a nanny would;
- ``close`` sends SIGTERM (the worker closes gracefully), then SIGKILL to its
  process group if it is still there after ``close_timeout`` seconds;
- the process dies with the driver: it watches its stdin, whose write end only
  the driver holds;
- ``Client.restart()`` works: the worker names, as its ``nanny``, a small server
  in the driver (:meth:`WorkerProcess._answer_as_nanny`) that answers the
  scheduler's ``kill`` by killing the process and returning once the new one
  has registered.

The environment of the process is the driver's plus what a Nanny would set
(``distributed.nanny.pre-spawn-environ`` and ``.environ``, e.g.
``OMP_NUM_THREADS=1``), the plan's own (``CUDA_VISIBLE_DEVICES``), and the
driver's Dask configuration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from contextlib import suppress
from typing import Any

import dask.config
from distributed.core import Server
from distributed.deploy.spec import ProcessInterface

from ..errors import ClusterError

__all__ = ["WorkerProcess"]

logger = logging.getLogger(__name__)

_ENTRY_MODULE = "airflowless.runtime.worker_main"


class WorkerProcess(ProcessInterface):
    """One ``distributed.Worker`` in a child process of the driver; a ``SpecCluster`` worker class.

    ``worker_kwargs`` go to ``distributed.Worker`` and must be JSON values
    (``nthreads``, ``resources``, ``memory_limit``, ``host``...). ``tls`` is a
    folder of certificates (:mod:`airflowless.runtime.tls`): the worker then
    listens on ``tls://`` and serves its dashboard over HTTPS, both requiring a
    certificate from the cluster's CA.

    >>> from distributed import Scheduler, SpecCluster                       # doctest: +SKIP
    >>> spec = {"cls": WorkerProcess, "options": {"nthreads": 1, "host": "127.0.0.1"}}
    >>> SpecCluster(scheduler={"cls": Scheduler, "options": {"host": "127.0.0.1"}},
    ...             workers={"cpu-0": spec})                                 # doctest: +SKIP
    """

    def __init__(self, scheduler: str, *, name: str, env: dict[str, str] | None = None,
                 start_timeout: float = 120.0, close_timeout: float = 10.0,
                 silence_logs: int = logging.WARN, tls: str | None = None, **worker_kwargs: Any) -> None:
        super().__init__(scheduler=scheduler, name=name)
        self.scheduler = scheduler
        self.name = name
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.close_timeout = close_timeout
        self.silence_logs = silence_logs
        self.tls = tls
        self.worker_kwargs = {**worker_kwargs, "name": name}
        self.process: asyncio.subprocess.Process | None = None
        self._closing = False
        self._supervisor: asyncio.Task[None] | None = None
        self._nanny: Server | None = None
        self._restarted: asyncio.Future[None] | None = None  # set while the scheduler restarts this worker

    @property
    def pid(self) -> int | None:
        """The pid of the worker process now (it changes when the process is started again)."""
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        await self._answer_as_nanny()
        await self._launch()
        self._supervisor = asyncio.ensure_future(self._supervise())
        await super().start()

    async def close(self) -> None:
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()
        await self._stop()
        if self._nanny is not None:
            await self._nanny.close()  # after the worker: a closing worker tells its nanny
        await super().close()

    async def _answer_as_nanny(self) -> None:
        """Listen (on loopback) for what the scheduler and the worker send a worker's nanny.

        - ``kill`` (the scheduler's ``restart_workers``: ``Client.restart()``,
          ``Client.restart_workers()``, a worker missing its heartbeats): kill
          the process, then return once the supervisor's new one has registered;
        - ``close_gracefully`` (a closing worker): nothing changes, a worker that
          exits while the cluster runs is started again;
        - nanny plugins are refused: there is no nanny process to run them in.
        """
        listen_args: dict[str, Any] = {}
        scheme = "tcp"
        if self.tls:
            from .tls import load

            scheme, listen_args = "tls", load(self.tls).security().get_listen_args("worker")
        self._nanny = Server({"kill": self._kill_to_restart, "close_gracefully": _accept,
                              "plugin_add": _refuse_nanny_plugin, "plugin_remove": _accept,
                              "get_logs": _no_logs})
        await self._nanny.listen(f"{scheme}://127.0.0.1:0", **listen_args)
        self.worker_kwargs["nanny"] = self._nanny.address

    async def _kill_to_restart(self, timeout: float = 5, reason: str = "") -> None:
        """Kill the process; return once its successor has registered with the scheduler."""
        if self._closing or self.process is None or self._supervisor is None or self._supervisor.done():
            return
        if self._restarted is None:
            self._restarted = asyncio.get_running_loop().create_future()
            # read even when the scheduler stopped waiting (its timeout): its error is logged by the supervisor
            self._restarted.add_done_callback(lambda done: done.cancelled() or done.exception())
            logger.info("airflowless: restarting worker %r (%s)", self.name, reason)
            self._kill_group(signal.SIGKILL)
        await asyncio.shield(self._restarted)

    async def _launch(self) -> None:
        """Start the process; return once its worker is registered, else kill it and raise ClusterError."""
        read_fd, write_fd = os.pipe()
        spec = {"scheduler": self.scheduler, "worker": self.worker_kwargs, "sys_path": sys.path,
                "ready_fd": write_fd, "silence_logs": self.silence_logs, "tls": self.tls}
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", _ENTRY_MODULE, json.dumps(spec),  # -P: launch.py says why
                stdin=asyncio.subprocess.PIPE, pass_fds=(write_fd,), env=self._child_env(),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        loop = asyncio.get_running_loop()
        with os.fdopen(read_fd, "rb") as ready:
            reading = loop.run_in_executor(None, ready.readline)
            code: int | None = None
            try:
                address = await asyncio.wait_for(asyncio.shield(reading), self.start_timeout)
            except asyncio.TimeoutError:
                address = b""
            else:
                if not address:  # the process closed the pipe: it is exiting
                    with suppress(asyncio.TimeoutError):
                        code = await asyncio.wait_for(self.process.wait(), 5.0)
            if not address:
                await self._stop(graceful=False)
                await reading  # the pipe's write end died with the process
                got = (f"it did not register within {self.start_timeout:g} s" if code is None
                       else f"it exited with code {code}")
                raise ClusterError(
                    f"expected worker {self.name!r} (pid {self.process.pid}) to register with the "
                    f"scheduler at {self.scheduler}, but {got}; its output is above. Fix what it "
                    "reports, or raise start_timeout on a slow machine"
                )

    async def _supervise(self) -> None:
        """Start the worker process again whenever it exits while the cluster runs."""
        while True:
            assert self.process is not None
            code = await self.process.wait()
            if self._closing:
                return
            self._kill_group(signal.SIGKILL)  # whatever its tasks started goes with it
            restarted, self._restarted = self._restarted, None
            if restarted is None:
                logger.warning("airflowless: worker %r (pid %d) exited with code %s; starting it again",
                               self.name, self.process.pid, code)
            try:
                await self._launch()
            except Exception as exc:  # logged: nobody awaits the supervisor
                logger.error("airflowless: worker %r could not be started again: %s", self.name, exc)
                if restarted is not None:
                    restarted.set_exception(exc)
                return
            if restarted is not None:
                restarted.set_result(None)

    async def _stop(self, *, graceful: bool = True) -> None:
        process = self.process
        if process is None:
            return
        if process.returncode is None and graceful:
            with suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), self.close_timeout)
        self._kill_group(signal.SIGKILL)
        await process.wait()
        if process.stdin is not None:
            process.stdin.close()

    def _kill_group(self, sig: signal.Signals) -> None:
        """Signal the process's group (it leads a session), which is gone only when all of it is."""
        if self.process is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(_config_env("distributed.nanny.pre-spawn-environ"))
        if env.get("PYTHONHASHSEED") in (None, "0"):
            env["PYTHONHASHSEED"] = "6640"  # as a Nanny does: the same hashes on every worker
        for key, value in _config_env("distributed.nanny.environ").items():
            env.setdefault(key, value)
        env.update(self.env)
        env["DASK_INTERNAL_INHERIT_CONFIG"] = dask.config.serialize(dask.config.global_config)
        return env


def _accept(**kwargs: Any) -> None:
    return None


def _no_logs(n: int | None = None) -> list[Any]:
    return []


def _refuse_nanny_plugin(**kwargs: Any) -> None:
    raise NotImplementedError("the embedded cluster's workers have no nanny process to run a NannyPlugin in; "
                              "use a WorkerPlugin, or a cluster started with `airflowless cluster up`")


def _config_env(key: str) -> dict[str, str]:
    values = dask.config.get(key, default={}) or {}
    return {str(k): str(v) for k, v in values.items()}
