"""TLS across simulated hosts: a `dask scheduler` and two `dask worker`s on hosts of their own (network
namespaces, tests/support/netns.py), each given only its own role's certificate, and a driver on a fourth host
joining with AIRFLOWLESS_TLS_DIR: a pipeline, a 2-rank fit with one rank per host, and a deployment whose
replicas live on the worker hosts, called over HTTPS from the driver's host; then every port is knocked on
from the driver's host as plaintext, certificate-less and wrong-CA clients."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from airflowless.runtime import tls
from tests.conftest import require_service
from tests.support.netns import NetnsUnavailable, build_network
from tests.support.tls_driver import KNOCKS, knock_from, run_tls_app

HOSTS = ("sched", "w1", "w2", "driver")


def _role_folder(full: tls.TLSFiles, folder: Path, role: str) -> Path:
    """What one host is handed: the CA certificate and its own role's certificate and key."""
    folder.mkdir(mode=0o700)
    for name in ("ca.pem", f"{role}.pem", f"{role}-key.pem"):
        shutil.copy(full.directory / name, folder / name)
    return folder


def _shared(folder: Path) -> dict[str, str]:
    """One store and one storage folder for every host, as a shared PostgreSQL and bucket would be."""
    return {"AIRFLOWLESS_DB": f"sqlite:///{folder / 'airflowless.db'}", "AIRFLOWLESS_STORAGE": str(folder / "storage")}


def _environ(home: Path, files: tls.TLSFiles, role: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOWLESS_", "DASK_"))}
    return {**base, "AIRFLOWLESS_HOME": str(home), "PYTHONPATH": str(Path(__file__).parents[2]),
            **_shared(home.parent), **tls.dask_environ(files, role)}


@pytest.mark.timeout(240)
def test_a_pipeline_fit_and_deployment_over_tls_across_hosts(tmp_path: Path) -> None:
    try:
        net = build_network(HOSTS, tag="tls")
    except NetnsUnavailable as exc:
        require_service("network namespaces", str(exc))
        raise
    try:
        tmp_path.chmod(0o755)
        full = tls.generate(tmp_path / "ca", hosts=[net.address(h) for h in HOSTS])
        other = tls.generate(tmp_path / "other").directory
        scheduler = f"tls://{net.address('sched')}:8786"
        sched_files = tls.load(_role_folder(full, tmp_path / "sched-certs", "scheduler"))
        net.spawn("sched", [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", net.address("sched"),
                            "--port", "8786", "--protocol", "tls", "--preload", "airflowless.runtime.tls",
                            "--dashboard-address", f"{net.address('sched')}:8787"],
                  log=tmp_path / "sched.log", env=_environ(tmp_path / "home-sched", sched_files, "scheduler"))
        for host in ("w1", "w2"):
            files = tls.load(_role_folder(full, tmp_path / f"{host}-certs", "worker"))
            net.spawn(host, [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--host",
                             net.address(host), "--name", host, "--nthreads", "1", "--resources", "CPU=1",
                             "--dashboard-address", f"{net.address(host)}:0", "--preload", "airflowless.runtime.tls",
                             "--death-timeout", "120"],
                      log=tmp_path / f"{host}.log", env=_environ(tmp_path / f"home-{host}", files, "worker"))
        driver_certs = _role_folder(full, tmp_path / "driver-certs", "client")
        driver = ("ip", "netns", "exec", net.namespace("driver"))
        env = {"AIRFLOWLESS_HOME": str(tmp_path / "home-driver"), "AIRFLOWLESS_ADDRESS": scheduler,
               "AIRFLOWLESS_TLS_DIR": str(driver_certs), **_shared(tmp_path)}
        _wait_for_log(tmp_path, ("w1", "w2"), "Registered to:")
        with run_tls_app([], env, prefix=driver, clean_env=True) as report:
            knocks = knock_from(driver, report["ports"], driver_certs, other)
    finally:
        net.destroy()

    assert report["address"] == scheduler
    assert report["pipeline"] == {"total": 90}
    assert report["fit_error"] is None and report["fit_rounds"] == 2
    assert (report["status"], report["answer"], report["handle"]) == (200, {"double": 42}, {"double": 8})
    replicas = {port["host"] for port in report["ports"] if port["kind"] == "serve data plane"}
    workers = {port["host"] for port in report["ports"] if port["kind"] == "worker"}
    assert workers == {net.address("w1"), net.address("w2")} and replicas <= workers
    expected = {knock: "open" if knock == "right-cert" else "refused" for knock, _ in KNOCKS}
    wrong = {port: seen for port, seen in knocks.items() if seen != expected}
    assert not wrong, f"ports that did not refuse strangers (or refused us): {wrong}"


def _wait_for_log(folder: Path, hosts: tuple[str, ...], text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not all(text in (folder / f"{h}.log").read_text(errors="replace") for h in hosts
                  if (folder / f"{h}.log").exists()) or not all((folder / f"{h}.log").exists() for h in hosts):
        if time.monotonic() > deadline:
            logs = "\n".join((folder / f"{h}.log").read_text(errors="replace")[-2000:] for h in ("sched", *hosts))
            raise AssertionError(f"the workers did not join the TLS scheduler within {timeout:g} s:\n{logs}")
        time.sleep(0.5)
