"""One simulated network for the folder: a scheduler host, two worker hosts and a driver host.

Built once for the folder (package scope) with :mod:`tests.support.netns`: ``dask scheduler``
on ``sched`` (10.213.0.1), a ``dask worker`` on each of ``w1`` and ``w2``
(10.213.0.2, .3) declaring ``CPU=1`` as airflowless's own workers do, and the
driver programs (:mod:`tests.multihost.programs`) run on ``driver``
(10.213.0.4). Every host shares this machine's filesystem, as hosts share a
network filesystem: the storage folder is common, the store is an SQLite file
only the driver opens (PostgreSQL on the machine's 127.0.0.1 is out of these
hosts' reach). Every host's processes share that SQLite file (``AIRFLOWLESS_DB``),
as they would share one PostgreSQL on a real cluster: stages record from the worker
they run on.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_service
from tests.support.netns import NetnsUnavailable, Network, build_network

PROGRAMS = Path(__file__).with_name("programs.py")
REPO = Path(__file__).parents[2]
WORKER_HOSTS = ("w1", "w2")
SCHEDULER_PORT = 8786


def _environ(folder: Path, name: str) -> dict[str, str]:
    """This machine's environment without airflowless/Dask settings, plus the host's own."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOWLESS_", "DASK_"))}
    # one store for every host: stages (a Tuner inside one, say) record from the worker they run on
    environ.update(AIRFLOWLESS_HOME=str(folder / f"home-{name}"), AIRFLOWLESS_STORAGE=str(folder / "storage"),
                   AIRFLOWLESS_DB=f"sqlite:///{folder / 'airflowless.db'}",
                   PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1",
                   # a host whose link is cut is noticed in seconds, not the default 5 minutes
                   DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL="15s")
    return environ


# Answers each scheduler address read from stdin with one JSON line: the workers it knows, by name.
_PROBE = """
import json, sys, distributed
for address in sys.stdin:
    try:
        with distributed.Client(address.strip(), timeout=10) as client:
            workers = client.scheduler_info(n_workers=-1)["workers"]
        print(json.dumps({"workers": {w["name"]: a for a, w in workers.items()}}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
"""


@dataclass
class Hosts:
    network: Network
    folder: Path
    _probe: subprocess.Popen[str] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"tcp://{self.network.address('sched')}:{SCHEDULER_PORT}"

    def start_worker(self, host: str) -> subprocess.Popen[bytes]:
        dask = str(Path(sys.executable).with_name("dask"))
        return self.network.spawn(host, [dask, "worker", self.address, "--host", self.network.address(host),
                                         "--name", host, "--nthreads", "1", "--resources", "CPU=1",
                                         # the worker's HTTP server (/health, /metrics) binds every
                                         # interface unless given an address
                                         "--dashboard-address", f"{self.network.address(host)}:0",
                                         "--death-timeout", "120"],
                                  log=self.folder / f"{host}.log", env=_environ(self.folder, host))

    def workers(self) -> dict[str, str]:
        """``name -> address`` of the workers the scheduler knows, asked from the driver host.

        Asked by a Dask client in a probe process that stays on the driver host between questions:
        importing ``distributed`` takes seconds, a new client for each question does not.
        """
        if self._probe is None or self._probe.poll() is not None:
            self._probe = subprocess.Popen(
                ["ip", "netns", "exec", self.network.namespace("driver"), sys.executable, "-c", _PROBE],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=(self.folder / "probe.log").open("ab"),
                text=True, env=_environ(self.folder, "driver"), start_new_session=True)
        assert self._probe.stdin is not None and self._probe.stdout is not None
        self._probe.stdin.write(self.address + "\n")
        self._probe.stdin.flush()
        if not select.select([self._probe.stdout], [], [], 60)[0]:
            self._probe.kill()
            raise RuntimeError(f"the probe did not answer within 60 s; its log is {self.folder / 'probe.log'}")
        answer = json.loads(self._probe.stdout.readline() or '{"error": "the probe exited"}')
        if "error" in answer:
            raise RuntimeError(f"cannot ask the scheduler for its workers: {answer['error']}")
        return dict(answer["workers"])

    def wait_for_workers(self, names: tuple[str, ...] = WORKER_HOSTS, timeout: float = 60) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = self.workers()
            except RuntimeError:
                found = {}
            if set(names) <= set(found):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers {names} did not join the scheduler; it knows {found}; logs in {self.folder}")
            time.sleep(0.5)

    def drive(self, *args: str, timeout: float = 240) -> dict[str, Any]:
        """Run a driver program on the driver host and return its RESULT."""
        output = self.run_program(*args).communicate(timeout=timeout)[0]
        (self.folder / f"{args[0]}.out").write_text(output)
        return _result(output)

    def run_program(self, *args: str) -> subprocess.Popen[str]:
        """Start a driver program on the driver host; its stdout is a pipe of text (stderr goes with it)."""
        out = self.folder / "out"
        out.mkdir(exist_ok=True)
        argv = ["ip", "netns", "exec", self.network.namespace("driver"), sys.executable, str(PROGRAMS),
                args[0], self.address, str(out), *args[1:]]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=_environ(self.folder, "driver"), cwd=self.folder, start_new_session=True)
        return proc


    def run_cli(self, *args: str, timeout: float = 240) -> str:
        """Run ``airflowless ARGS`` on the driver host; its output (it must succeed)."""
        airflowless = str(Path(sys.executable).with_name("airflowless"))
        done = subprocess.run(["ip", "netns", "exec", self.network.namespace("driver"), airflowless, *args],
                              capture_output=True, text=True, timeout=timeout, env=_environ(self.folder, "driver"),
                              cwd=self.folder)
        output = done.stdout + done.stderr
        (self.folder / f"{args[0]}.out").write_text(output)
        assert done.returncode == 0, output[-6000:]
        return output


    def follow(self, proc: subprocess.Popen[str], on_line: Callable[[str], None], *, name: str,
               timeout: float) -> str:
        """Feed each line ``proc`` prints to ``on_line`` until it ends; its whole output (kept in the folder)."""
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        output: list[str] = []
        deadline = time.monotonic() + timeout
        try:
            while (line := lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
                output.append(line)
                on_line(line)
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"{name} did not end within {timeout:g} s:\n{''.join(output)[-6000:]}") from None
        finally:
            (self.folder / f"{name}.out").write_text("".join(output))
        proc.wait(timeout=30)
        return "".join(output)


def _result(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the driver program printed no result:\n{output[-6000:]}"
    return dict(json.loads(lines[-1][len("RESULT "):]))


@pytest.fixture(scope="package")  # torn down once this folder's tests are done, not at the end of the suite
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    try:
        network = build_network(["sched", *WORKER_HOSTS, "driver"])
    except NetnsUnavailable as exc:
        require_service("network namespaces", str(exc))
        raise
    folder = tmp_path_factory.mktemp("hosts")
    folder.chmod(0o755)
    hosts = Hosts(network, folder)
    try:
        dask = str(Path(sys.executable).with_name("dask"))
        network.spawn("sched", [dask, "scheduler", "--host", network.address("sched"), "--port",
                                str(SCHEDULER_PORT), "--dashboard-address", f"{network.address('sched')}:8787"],
                      log=folder / "sched.log", env=_environ(folder, "sched"))
        for host in WORKER_HOSTS:
            hosts.start_worker(host)
        hosts.wait_for_workers()
        yield hosts
    finally:
        network.destroy()


@pytest.fixture
def healthy(hosts: Hosts) -> Hosts:
    """The hosts with both worker hosts up and joined (a fault test before may have taken one down)."""
    for host in WORKER_HOSTS:
        hosts.network.restore(host)
    known = hosts.workers()
    if set(WORKER_HOSTS) <= set(known):
        return hosts
    for host in WORKER_HOSTS:
        if host not in known:
            hosts.network.kill_host(host)
            hosts.start_worker(host)
    hosts.wait_for_workers()
    return hosts
