"""Conditional reads over real HTTP: a read's 200 carries an ETag of its body, If-None-Match with it gets a
304 and no body while the record is the same, a 200 with a new ETag once it changed; a request refused by
the token check gets neither."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflowless.control.context import ControlContext
from airflowless.store import open_store

TOKEN = "the-cluster-token-0123456789"
V1 = "airflowless/api/v1/"


def fetch(url: str, *, etag: str | None = None, token: str | None = None,
          method: str = "GET") -> tuple[int, Any, bytes]:
    """``(status, headers, body)`` of one real HTTP request."""
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if etag is not None:
        request.add_header("If-None-Match", etag)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:  # urllib counts a 304 among the errors too
        return exc.code, exc.headers, exc.read()


@pytest.fixture
def record(tmp_path: Path) -> tuple[str, int]:
    """A record with one experiment of one trial that has reported once; ``(url, experiment id)``."""
    url = f"sqlite:///{tmp_path / 'record.db'}"
    store = open_store(url)
    experiment_id = store.create_experiment("cached", kind="tune", config={}, metric="loss", mode="min")
    trial_id = store.add_trial(experiment_id, "t0", config={"x": 1}, status="running")
    store.add_metrics(trial_id, 1, {"loss": 1.0})
    store.close()
    return url, experiment_id


def test_an_unchanged_read_is_a_304_and_a_changed_one_a_200_with_a_new_etag(
        record: tuple[str, int], control_server: Any) -> None:
    url, experiment_id = record
    base = control_server(ControlContext(url, token=TOKEN)) + V1
    path = f"{base}experiments/{experiment_id}"
    status, headers, body = fetch(path)
    etag = headers["ETag"]
    assert status == 200 and etag and body.startswith(b"{")
    assert fetch(path)[1]["ETag"] == etag  # the same body, the same ETag

    status, headers, again = fetch(path, etag=etag)
    assert (status, again, headers["ETag"]) == (304, b"", etag)
    assert headers["Content-Type"] is None and headers["Cache-Control"] == "no-store"
    assert fetch(path, etag=f'"other", {etag}')[0] == 304  # any of a list
    assert fetch(path, etag='"other"')[0] == 200
    assert fetch(f"{base}experiments/{experiment_id}/metrics", etag=etag)[0] == 200  # another body

    store = open_store(url)
    trial_id = store.add_trial(experiment_id, "t1", config={"x": 2}, status="running")
    store.close()
    status, headers, changed = fetch(path, etag=etag)
    assert status == 200 and headers["ETag"] not in (None, etag) and str(trial_id).encode() in changed
    assert fetch(path, etag=headers["ETag"])[0] == 304

    # errors and actions carry no ETag, whatever If-None-Match says
    status, headers, _ = fetch(f"{base}experiments/999", etag="*")
    assert status == 404 and headers["ETag"] is None
    status, headers, _ = fetch(f"{base}trials/1/stop", etag="*", token=TOKEN, method="POST")
    assert status not in (200, 304) and headers["ETag"] is None


def test_a_request_refused_by_the_token_check_gets_no_etag_and_no_304(
        record: tuple[str, int], control_server: Any) -> None:
    url, experiment_id = record
    ctx = ControlContext(url, token=TOKEN)
    base = control_server(ctx, host="0.0.0.0").replace("0.0.0.0", "127.0.0.1") + V1
    assert ctx.loopback is False  # every request needs the token
    path = f"{base}experiments/{experiment_id}"
    status, headers, _ = fetch(path, token=TOKEN)
    etag = headers["ETag"]
    assert status == 200 and etag
    for token, refused in ((None, 401), (TOKEN[::-1], 403)):
        for guess in (etag, "*"):
            status, headers, body = fetch(path, etag=guess, token=token)
            assert (status, headers["ETag"]) == (refused, None) and b'"error"' in body, (token, guess)
    assert fetch(path, etag=etag, token=TOKEN)[0] == 304
