"""A real one-machine Slurm cluster (munged, slurmctld, slurmd) for the tests in this folder.

The fixture writes a minimal ``slurm.conf`` for this host (its CPUs, part of
its memory, one partition, no accounting, no cgroups: ``proctrack/linuxproc``
and ``task/none``), starts its own ``munged`` with a key of its own on a socket
of its own, then ``slurmctld`` and ``slurmd`` in the foreground (``-D``) with
every state file, spool and log under a temporary folder, and waits for
``sinfo`` to show the node idle. Clients (``sbatch``, ``squeue``, and
dask-jobqueue through them) find it by ``SLURM_CONF``, set for the session.
Teardown cancels the jobs and stops exactly the three daemons it started; a
Slurm or munge service the machine runs is never touched (other ports, other
socket, other config).

Needs root (slurmd runs jobs as their user) and Debian's ``slurm-wlm`` and
``munge``: without them the tests skip on a laptop and fail in CI.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_service

_DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sinfo", "squeue", "sbatch", "scancel")


@dataclass(frozen=True)
class Slurm:
    """Where the test Slurm cluster's config, logs and state are."""

    conf: Path
    root: Path
    node: str
    cpus: int

    def squeue_jobs(self) -> list[str]:
        """The ids of the jobs pending or running now."""
        out = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, timeout=10,
                             env=_env(self.conf), check=True).stdout
        return [line.split()[0] for line in out.splitlines() if line.strip()]

    def logs(self) -> str:
        tails = []
        for log in sorted((self.root / "log").glob("*")):
            lines = log.read_text(errors="replace").splitlines()[-15:]
            tails.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(tails)


def _env(conf: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(conf)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 2048


def _config(root: Path, node: str, cpus: int) -> str:
    ctld, slurmd = _free_port(), _free_port()
    memory = max(1024, _memory_mb() // 2)
    return "\n".join([
        "ClusterName=airflowless-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ctld}",
        f"SlurmdPort={slurmd}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root}/munge/munge.socket",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "MinJobAge=5",
        "KillWait=5",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _start(argv: list[str], root: Path, name: str, conf: Path) -> subprocess.Popen[bytes]:
    out = open(root / "log" / f"{name}.out", "wb")  # noqa: SIM115 - the daemon writes it until teardown
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=_env(conf), start_new_session=True)


def _node_state(conf: Path) -> str:
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10, env=_env(conf))
    return done.stdout.strip()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    """A Slurm cluster of this one machine, with ``SLURM_CONF`` pointing at it for the session."""
    missing = [tool for tool in _DAEMONS if shutil.which(tool) is None]
    if missing:
        require_service("slurm", f"{', '.join(missing)} not found; install Debian's slurm-wlm and munge")
    if os.geteuid() != 0:
        require_service("slurm", "slurmd must run as root to start jobs, and these tests do not run as root")
    root = Path(tmp_path_factory.mktemp("slurm"))
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir()
    (root / "munge").chmod(0o711)
    node, cpus = socket.gethostname().split(".")[0], os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(_config(root, node, cpus))
    key = root / "munge" / "munge.key"
    subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True, timeout=30)
    key.chmod(0o600)
    cluster = Slurm(conf=conf, root=root, node=node, cpus=cpus)
    daemons = [_start(["munged", "-F", "-f", f"--socket={root}/munge/munge.socket", f"--key-file={key}",
                       f"--log-file={root}/log/munged.log", f"--pid-file={root}/munge/munged.pid",
                       f"--seed-file={root}/munge/seed"], root, "munged", conf)]
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        deadline = time.monotonic() + 10
        while not (root / "munge" / "munge.socket").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        daemons.append(_start(["slurmctld", "-D", "-f", str(conf)], root, "slurmctld", conf))
        daemons.append(_start(["slurmd", "-D", "-f", str(conf)], root, "slurmd", conf))
        deadline = time.monotonic() + 30
        while (state := _node_state(conf)) != "idle":
            dead = [d.args[0] for d in daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                require_service("slurm", f"the node did not become idle (sinfo says {state!r}, exited: {dead}); "
                                f"logs:\n{cluster.logs()}")
            time.sleep(0.2)
        yield cluster
    finally:
        if _node_state(conf):
            subprocess.run(["scancel", "--full", "--partition=debug"], env=_env(conf), timeout=10,
                           capture_output=True)
        for daemon in reversed(daemons):  # slurmd, slurmctld, then munged: only the ones started here
            daemon.terminate()
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
