"""``airflowless ui``: a real server process reading a record (SQLite, PostgreSQL), no cluster."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from airflowless.cli.main import cli
from airflowless.store import open_store
from tests.control.conftest import call
from tests.support.eventually import eventually


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[Callable[..., tuple[str, subprocess.Popen[str]]]]:
    """Start ``python -m airflowless ui ARGS`` and return its link once it listens."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen[str]]:
        environ = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), **(env or {})}
        if env is None or "AIRFLOWLESS_TOKEN" not in env:
            environ.pop("AIRFLOWLESS_TOKEN", None)
        process = subprocess.Popen([sys.executable, "-m", "airflowless.cli", "ui", "--port", "0", *args], env=environ,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        started.append(process)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(process.stderr or []), daemon=True).start()

        def link() -> str | None:
            assert process.poll() is None, "".join(lines)
            match = next((m for line in list(lines) if (m := re.search(r" at (http://\S+/airflowless/) ", line))),
                         None)
            return match.group(1) if match else None

        found = eventually(link, timeout=60, message=lambda: "".join(lines))
        assert found is not None
        return found, process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _fill(url: str) -> int:
    store = open_store(url)
    try:
        run_id = store.create_run("recorded", module="m", params={"n": 3})
        store.finish_run(run_id, "succeeded")
        return run_id
    finally:
        store.close()


def _stops_on_ctrl_c(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 0


@pytest.mark.timeout(90)
def test_ui_serves_a_sqlite_record_without_a_cluster(ui: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    run_id = _fill(url)
    link, process = ui("--db", url)
    assert link.startswith("http://127.0.0.1:")
    status, body = call(link + "api/v1/runs")
    assert status == 200 and [(r["id"], r["status"]) for r in body["runs"]] == [(run_id, "succeeded")]
    status, live = call(link + "api/v1/live/data")
    assert status == 200 and live["available"] is False and "no cluster" in live["reason"]
    assert call(link + f"api/v1/runs/{run_id}/cancel", method="POST")[0] == 401
    status, body = call(link + f"api/v1/runs/{run_id}/cancel", method="POST", token="any")
    assert status == 403 and "without a token" in body["error"]
    assert call(link.replace("/airflowless/", "/"))[0] == 200  # / leads to the pages (or the API's document)
    _stops_on_ctrl_c(process)


@pytest.mark.timeout(90)
def test_ui_serves_a_postgresql_record(ui: Any, postgres_url: str) -> None:
    run_id = _fill(postgres_url)
    link, process = ui("--db", postgres_url)
    status, body = call(link + f"api/v1/runs/{run_id}")
    assert status == 200 and body["pipeline"] == "recorded" and body["params"] == {"n": 3}
    _stops_on_ctrl_c(process)


@pytest.mark.timeout(90)
def test_ui_beyond_loopback_needs_the_token_for_everything(ui: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    _fill(url)
    refused = CliRunner().invoke(cli, ["ui", "--db", url, "--host", "0.0.0.0"], env={"AIRFLOWLESS_TOKEN": ""})
    assert refused.exit_code == 2 and "AIRFLOWLESS_TOKEN" in refused.stderr

    link, process = ui("--db", url, "--host", "0.0.0.0", env={"AIRFLOWLESS_TOKEN": "a-long-shared-secret"})
    reads = link.replace("0.0.0.0", "127.0.0.1") + "api/v1/runs"
    assert call(reads)[0] == 401
    assert call(reads, token="a-long-shared-secret-not")[0] == 403
    status, body = call(reads, token="a-long-shared-secret")
    assert status == 200 and len(body["runs"]) == 1
    _stops_on_ctrl_c(process)


def test_ui_with_a_bad_store_url_says_so() -> None:
    done = CliRunner().invoke(cli, ["ui", "--db", "nosuchdb://x/y"])
    assert done.exit_code == 2 and "error:" in done.stderr and "nosuchdb" in done.stderr
