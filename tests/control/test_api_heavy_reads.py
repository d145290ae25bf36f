"""Heavy reads of the API: metrics come in pages, a flood of reads is bounded, a read whose client left is skipped.

The real tornado control server on loopback over a SQLite record written with
the store's own API; clients are real sockets (urllib, and raw sockets that
send a request and hang up).
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflowless.control.context import ControlContext
from airflowless.store import open_store
from tests.control.conftest import call

V1 = "airflowless/api/v1/"
HEAVY_REPORTS = 5_000


def _record(tmp_path: Path, reports: dict[str, int]) -> tuple[str, int, dict[str, int]]:
    """An experiment whose trials (name -> how many reports) report several metrics per step."""
    url = f"sqlite:///{tmp_path / 'record.db'}"
    store = open_store(url)
    experiment_id = store.create_experiment("heavy", kind="tune", config={}, metric="loss", mode="min")
    ids = {}
    for name, count in reports.items():
        ids[name] = trial_id = store.add_trial(experiment_id, name, config={})
        rows = [(trial_id, step, {"loss": 1 / (step + 1), "acc": step / 100, f"only_{name}": step})
                for step in range(1, count + 1)]
        if rows:
            store.record_batch(rows, {})
    store.close()
    return url, experiment_id, ids


def test_metrics_come_in_pages_that_join_up_to_every_report(tmp_path: Path, control_server: Any) -> None:
    url, experiment_id, ids = _record(tmp_path, {"a": 25, "b": 0, "c": 12})
    base = control_server(ControlContext(url)) + V1

    pages, after = [], ""
    while True:
        status, page = call(base + f"trials/{ids['a']}/metrics?limit=10{after}")
        assert status == 200, page
        pages.append(page)
        if page["next"] is None:
            break
        after = f"&after={page['next']}"
    assert [len(page["metrics"]) for page in pages] == [10, 10, 5]
    assert [page["next"] for page in pages] == [10, 20, None]
    assert [row["step"] for page in pages for row in page["metrics"]] == list(range(1, 26))
    status, whole = call(base + f"trials/{ids['a']}/metrics")  # the default page holds 10,000
    assert whole["next"] is None and len(whole["metrics"]) == 25

    by_trial: dict[int, list[int]] = {}
    after, first = "", None
    while True:
        status, page = call(base + f"experiments/{experiment_id}/metrics?limit=7{after}")
        assert status == 200, page
        first = first or page
        for entry in page["trials"]:
            by_trial.setdefault(entry["trial_id"], []).extend(row["step"] for row in entry["metrics"])
        if page["next"] is None:
            break
        after = f"&after={page['next']}"
    assert [entry["trial_id"] for entry in first["trials"]] == [ids["a"], ids["b"], ids["c"]]  # b: no reports
    assert by_trial == {ids["a"]: list(range(1, 26)), ids["b"]: [], ids["c"]: list(range(1, 13))}

    for bad in (f"trials/{ids['a']}/metrics?after=x", f"trials/{ids['a']}/metrics?limit=10001",
                f"experiments/{experiment_id}/metrics?after=3", f"experiments/{experiment_id}/metrics?after=a:1",
                f"experiments/{experiment_id}/metrics?after=99999999999999999999:0",
                f"experiments/{experiment_id}/metrics?limit=0"):
        status, body = call(base + bad)
        assert status == 400 and ("after" in body["error"] or "limit" in body["error"]), (bad, body)


def _status_line(sock: socket.socket) -> tuple[int, str]:
    """The status and headers of the answer on ``sock`` (the body is left unread)."""
    sock.settimeout(120)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection without an answer"
        head += chunk
    text = head.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    return int(text.split(" ", 2)[1]), text


def _get(url: str) -> tuple[int, dict[str, str], float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            response.read()
            return response.status, dict(response.headers), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, dict(exc.headers), time.monotonic() - started


@pytest.mark.timeout(180)
def test_a_flood_of_heavy_reads_is_bounded_and_reads_whose_clients_left_are_skipped(
        tmp_path: Path, control_server: Any) -> None:
    url, _, ids = _record(tmp_path, {"big": HEAVY_REPORTS})
    address = control_server(ControlContext(url))
    heavy = address + V1 + f"trials/{ids['big']}/metrics"
    light = address + V1 + "runs"
    _, _, one = _get(heavy)  # how long one heavy read takes here

    # 1. 150 requests sent at once: those past the bound are told to come back at once; none waits for ever
    port = int(address.rsplit(":", 1)[1].strip("/"))
    request = f"GET /{V1}trials/{ids['big']}/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]
    started = time.monotonic()
    for sock in socks:
        sock.sendall(request)
    answers = [_status_line(sock) for sock in socks]
    took = time.monotonic() - started
    for sock in socks:
        sock.close()
    statuses = Counter(status for status, _ in answers)
    assert set(statuses) == {200, 503}, statuses
    assert statuses[503] >= 150 - 64 - 10, statuses  # 64 wait at most: a few finish while the rest come in
    assert all("retry-after: 1" in head.lower() for status, head in answers if status == 503)
    assert took < 64 * one + 30, took

    # 2. 60 clients ask and hang up: their reads are never made, so a read after them is not held up
    for _ in range(60):
        with socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1].strip("/")))) as sock:
            sock.sendall(f"GET /{V1}trials/{ids['big']}/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    time.sleep(0.5)  # the server sees the connections close
    status, _, took = _get(light)
    assert status == 200
    assert took < 3 * one + 2, f"a light read waited {took:.1f} s behind abandoned heavy reads of {one:.2f} s each"
