"""The control plane on real schedulers: the embedded cluster of ``airflowless.init()`` and a
``dask scheduler --preload airflowless.dashboard`` process with a ``dask worker`` process."""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflowless.control import mount
from airflowless.store import open_store
from tests.conftest import require_module
from tests.control.conftest import call
from tests.support.eventually import eventually
from tests.support.pages import fetch
from tests.support.processes import stop

V1 = "airflowless/api/v1/"


@pytest.mark.timeout(120)
def test_embedded_cluster_serves_the_api_from_the_drivers_store(cluster_client: Any, home: Path) -> None:
    scheduler = cluster_client.cluster.scheduler
    ctx = mount.installed(scheduler)
    assert ctx is not None and ctx.token and ctx.loopback and ctx.follow_settings
    assert mount.install(scheduler) is ctx  # once per scheduler
    base = mount.link(scheduler)
    assert base == cluster_client.dashboard_link.replace("/status", "/airflowless/")

    store = open_store()  # this test's AIRFLOWLESS_HOME: the embedded scheduler reads the driver's store now
    run_id = store.create_run("embedded", module="m", params={})
    store.close()
    status, body = call(base + "api/v1/runs")
    assert status == 200 and [r["id"] for r in body["runs"]] == [run_id]

    assert call(base + "api/v1/runs/999/cancel", method="POST")[0] == 401
    assert call(base + "api/v1/runs/999/cancel", method="POST", token=ctx.token + "x")[0] == 403
    status, body = call(base + "api/v1/runs/999/cancel", method="POST", token=ctx.token)
    assert status == 404 and "no run" in body["error"]

    # distributed's own routes still answer (its /sitemap.json fails on Bokeh's static handler, with or without us)
    assert call(cluster_client.dashboard_link)[0] == 200
    assert call(base.replace("/airflowless/", "/health")) == (200, "ok")


def test_init_names_the_control_plane_and_keeps_a_generated_token_private(cluster_client: Any) -> None:
    from airflowless.runtime.cluster import _install_control_plane

    ctx = mount.installed(cluster_client.cluster.scheduler)
    assert ctx is not None
    line = _install_control_plane(cluster_client.cluster)  # the line init() prints (installing again: same ctx)
    assert line == f"airflowless: control plane {mount.link(cluster_client.cluster.scheduler)} (token in {ctx.token_hint})"
    assert re.fullmatch(r"airflowless: control plane http://127\.0\.0\.1:\d+/airflowless/ \(token in .+\)", line)
    if ctx.token_hint != "AIRFLOWLESS_TOKEN":
        token_file = Path(ctx.token_hint)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert token_file.read_text().strip() == ctx.token and len(ctx.token) >= 40


@pytest.fixture
def dask_scheduler(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A real ``dask scheduler --preload airflowless.dashboard`` and one ``dask worker``, with their own home
    (and the scheduler's extra arguments, when the test parametrizes this fixture with them)."""
    dask = shutil.which("dask", path=str(Path(sys.executable).parent))
    assert dask, "the dask command is installed with distributed"
    home = tmp_path / "home"
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "AIRFLOWLESS_DB": f"sqlite:///{tmp_path / 'record.db'}"}
    env.pop("AIRFLOWLESS_TOKEN", None)
    log: list[str] = []
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scheduler = subprocess.Popen(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", "127.0.0.1:0",
         "--preload", "airflowless.dashboard", *getattr(request, "param", [])],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path)
    worker = subprocess.Popen(  # at once: it connects when the scheduler listens
        [dask, "worker", f"tcp://127.0.0.1:{port}", "--nworkers", "1", "--nthreads", "1", "--no-nanny",
         "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    processes: list[subprocess.Popen[Any]] = [scheduler, worker]
    threading.Thread(target=lambda: log.extend(scheduler.stderr or []), daemon=True).start()
    try:
        def found(pattern: str) -> str | None:
            match = next((m for line in list(log) if (m := re.search(pattern, line))), None)
            assert scheduler.poll() is None, "".join(log)
            return match.group(1) if match else None

        address = eventually(lambda: found(r"Scheduler at:\s+(tcp://\S+)"), timeout=60, message=lambda: "".join(log))
        link = eventually(lambda: found(r"airflowless: control plane at (\S+) "), timeout=60,
                          message=lambda: "".join(log))
        yield {"address": address, "link": link, "home": home, "db": env["AIRFLOWLESS_DB"], "log": log}
    finally:
        for process in reversed(processes):  # the worker first: the scheduler then closes at once
            stop(process)


@pytest.mark.timeout(120)
def test_preload_installs_the_control_plane_on_a_real_dask_scheduler(dask_scheduler: dict[str, Any]) -> None:
    from distributed import Client

    store = open_store(dask_scheduler["db"])
    run_id = store.create_run("outside", module="m", params={"n": 2})
    store.close()
    link = dask_scheduler["link"]
    with Client(dask_scheduler["address"], timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3

    status, body = call(link + f"api/v1/runs/{run_id}")
    assert status == 200 and body["pipeline"] == "outside" and body["params"] == {"n": 2}
    status, live = call(link + "api/v1/live/data")
    assert status == 200 and isinstance(live, dict)

    port = int(re.search(r":(\d+)/", link).group(1))  # type: ignore[union-attr]
    token_file = dask_scheduler["home"] / "tokens" / f"{socket.gethostname()}-{port}"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert str(token_file) in "".join(dask_scheduler["log"])  # the log names where the token is, not the token
    token = token_file.read_text().strip()
    assert token not in "".join(dask_scheduler["log"])
    assert call(link + "api/v1/trials/5/stop", method="POST")[0] == 401
    assert call(link + "api/v1/trials/5/stop", method="POST", token="wrong")[0] == 403
    status, body = call(link + "api/v1/trials/5/stop", method="POST", token=token)
    assert status == 404 and "no trial" in body["error"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dask_scheduler", [["--dashboard-prefix", "/dask"]], indirect=True)
def test_preload_honours_the_dashboard_prefix(dask_scheduler: dict[str, Any]) -> None:
    link = dask_scheduler["link"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/dask/airflowless/", link), link
    status, body = call(link + "api/v1/runs")
    assert status == 200 and body == {"runs": []}
    status, html, _ = fetch(link + "experiments")
    assert status == 200 and 'data-root="/dask/airflowless"' in html and 'href="/dask/status"' in html
    dashboard = link.removesuffix("airflowless/")
    status, nav, _ = fetch(dashboard + "status")  # the Dask dashboard's own "airflowless" entry is relative
    assert status == 200 and 'href="airflowless"' in nav
    assert fetch(dashboard.removesuffix("dask/") + "airflowless/")[0] == 404  # nothing left outside the prefix

    # the API's document names the prefix as its server, so an OpenAPI client reaches the routes under it
    status, document = call(link + "api/v1/openapi.json")
    assert status == 200 and [server["url"] for server in document["servers"]] == ["/dask"]
    assert "/airflowless/api/v1/runs" in document["paths"]
    schemathesis: Any = require_module("schemathesis")  # an OpenAPI client, reading the document where it is served
    schema = schemathesis.openapi.from_url(link + "api/v1/openapi.json")
    assert schema.get_base_url() == dashboard.rstrip("/")
    response = schema["/airflowless/api/v1/runs"]["GET"].Case(query={"limit": 5}).call()
    assert response.status_code == 200 and response.json() == {"runs": []}
    assert response.request.url == dashboard + "airflowless/api/v1/runs?limit=5"


def test_the_token_file_goes_with_its_scheduler(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from distributed import Scheduler

    monkeypatch.delenv("AIRFLOWLESS_TOKEN", raising=False)

    async def scheduler_lifetime() -> Path:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0") as scheduler:
            ctx = mount.install(scheduler)
            assert ctx is not None and ctx.token is not None
            token_file = Path(ctx.token_hint)
            assert token_file.parent == home / "tokens" and token_file.read_text().strip() == ctx.token
        return token_file

    assert not asyncio.run(scheduler_lifetime()).exists()  # ten clusters leave no ten token files
