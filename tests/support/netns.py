"""Simulated hosts: a private network of Linux network namespaces, for multi-host tests.

Each host is a network namespace with ``lo`` and one ``eth0``; the ``eth0``
ends are veth pairs whose other ends are ports of a bridge living in a
namespace of its own (the "switch"). Addresses come from 10.213.0.0/24 and
exist only inside these namespaces: nothing is added to the machine's own
namespace, and nothing is routed anywhere else. Needs root and iproute2.

>>> net = build_network(["sched", "w1", "driver"])          # doctest: +SKIP
>>> net.address("w1")                                        # doctest: +SKIP
'10.213.0.2'
>>> proc = net.spawn("w1", ["dask", "worker", "tcp://10.213.0.1:8786"], log=path)  # doctest: +SKIP
>>> net.cut("w1"); net.restore("w1")                         # doctest: +SKIP
>>> net.destroy()                                            # doctest: +SKIP

Namespaces are named ``af-<pid>-<host>`` after the test process; those left
by a process that no longer runs (a crashed earlier session) are removed by
:func:`remove_stale`, which :func:`build_network` calls first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["Network", "NetnsUnavailable", "build_network", "remove_stale", "netns_problem"]

PREFIX = "af-"
SUBNET = "10.213.0"


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no iproute2, or no kernel support)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsUnavailable(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done


def netns_problem() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the tests as root, as .ci/run does)"
    name = f"{PREFIX}{os.getpid()}-probe"
    try:
        _ip("netns", "add", name)
        _ip("netns", "del", name)
    except (OSError, NetnsUnavailable) as exc:
        return f"`ip netns add` does not work here: {exc}"
    return None


def _namespaces() -> list[str]:
    listing = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _pids_in(namespace: str) -> list[int]:
    listing = _ip("netns", "pids", namespace, check=False).stdout
    return [int(p) for p in listing.split() if p.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all_in(namespace: str) -> None:
    """SIGKILL every process whose network namespace is ``namespace``; wait until they are gone."""
    deadline = time.monotonic() + 10
    while (pids := _pids_in(namespace)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _delete(namespace: str) -> None:
    _kill_all_in(namespace)
    _ip("netns", "del", namespace, check=False)


def remove_stale() -> list[str]:
    """Delete ``af-<pid>-*`` namespaces (and their processes) whose creating process is gone."""
    removed = []
    for name in _namespaces():
        parts = name.split("-")
        if name.startswith(PREFIX) and len(parts) >= 3 and parts[1].isdigit() and not _alive(int(parts[1])):
            _delete(name)
            removed.append(name)
    return removed


@dataclass
class Network:
    """Hosts on one private bridge; ``hosts`` maps a host's name to its namespace and address."""

    switch: str
    hosts: dict[str, tuple[str, str]]  # name -> (namespace, address)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def namespace(self, host: str) -> str:
        return self.hosts[host][0]

    def address(self, host: str) -> str:
        return self.hosts[host][1]

    def spawn(self, host: str, argv: Sequence[str], *, log: Path | None = None,
              env: dict[str, str] | None = None, stdout: int | IO[Any] | None = None,
              cwd: str | Path | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host`` (in its namespace); its output goes to ``log`` unless ``stdout`` is given."""
        out: int | IO[Any] | None = stdout
        if out is None and log is not None:
            out = open(log, "ab")  # noqa: SIM115 - the child keeps it; closed when the process object goes
        proc = subprocess.Popen(["ip", "netns", "exec", self.namespace(host), *argv], stdout=out,
                                stderr=subprocess.STDOUT if log is not None and stdout is None else None,
                                env=env, cwd=cwd, start_new_session=True)
        self.processes.append(proc)
        return proc

    def kill_host(self, host: str) -> list[int]:
        """SIGKILL every process running on ``host`` (as a machine losing power would); return their pids."""
        pids = _pids_in(self.namespace(host))
        _kill_all_in(self.namespace(host))
        return pids

    def cut(self, host: str) -> None:
        """Take ``host``'s link down (its switch port): it can reach nobody and nobody reaches it."""
        _ip("-n", self.switch, "link", "set", _port(host), "down")

    def restore(self, host: str) -> None:
        _ip("-n", self.switch, "link", "set", _port(host), "up")

    def destroy(self) -> None:
        """Kill every process on the hosts and delete the namespaces (with their links)."""
        for namespace, _ in self.hosts.values():
            _delete(namespace)
        _delete(self.switch)
        for proc in self.processes:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


def _port(host: str) -> str:
    return f"p-{host}"[:15]  # IFNAMSIZ


def build_network(hosts: Sequence[str], *, tag: str | None = None) -> Network:
    """Create the hosts (addresses 10.213.0.1, .2, ... in the order given) and their switch.

    Raises :class:`NetnsUnavailable` when namespaces cannot be made; on any
    other failure what was made is removed again.
    """
    problem = netns_problem()
    if problem:
        raise NetnsUnavailable(problem)
    remove_stale()
    base = f"{PREFIX}{os.getpid()}-{tag + '-' if tag else ''}"
    switch = f"{base}switch"
    network = Network(switch=switch, hosts={h: (f"{base}{h}", f"{SUBNET}.{i}") for i, h in enumerate(hosts, 1)})
    try:
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "set", "lo", "up")
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for host, (namespace, address) in network.hosts.items():
            _ip("netns", "add", namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("-n", switch, "link", "add", _port(host), "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _ip("-n", switch, "link", "set", _port(host), "master", "br0", "up")
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
    except BaseException:
        network.destroy()
        raise
    return network
