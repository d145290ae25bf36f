"""A cached stage is reused only while what it did still holds, and relative paths key by where they point."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflowless import pipeline, stage
from airflowless.dag.cache import key_of_path

pytestmark = pytest.mark.usefixtures("cluster_client")


def _bump(counter: Path) -> int:
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    return count


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"up")
        if self.path == "/stop":
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def log_message(self, *args: Any) -> None:
        return None


def answers(output: dict[str, Any]) -> bool:
    """The cache check of ``serve_here``: does the server it started still answer?"""
    try:
        return httpx.get(output["url"], timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@stage(cache_valid=answers)
def serve_here(counter: str) -> dict[str, Any]:
    """A side-effecting stage: it starts a server in its worker and returns the URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _bump(Path(counter))
    return {"url": f"http://127.0.0.1:{server.server_address[1]}/"}


@stage
def use(served: dict[str, Any]) -> str:
    return served["url"]


@pipeline
def serving(counter: str):
    return use(serve_here(counter))


def test_a_side_effecting_stage_is_run_again_when_its_effect_is_gone(store, tmp_path: Path) -> None:  # noqa: ANN001
    counter = str(tmp_path / "starts")
    first = serving.run({"counter": counter}, store=store)
    url = first.value
    assert httpx.get(url, timeout=5).status_code == 200

    second = serving.run({"counter": counter}, store=store)  # the server still answers: reused
    assert second.record.stage("serve_here").status == "cached" and second.value == url
    assert Path(counter).read_text() == "1"

    httpx.get(url + "stop", timeout=5)  # the effect ends (the server stops), the cached output stays
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, timeout=2)
    third = serving.run({"counter": counter}, store=store)
    assert third.record.stage("serve_here").status == "succeeded", "a dead URL was served from the cache"
    assert third.value != url and httpx.get(third.value, timeout=5).status_code == 200
    assert Path(counter).read_text() == "2"
    httpx.get(third.value + "stop", timeout=5)


def test_the_taxi_deploy_stage_is_never_served_from_the_cache() -> None:
    from pipelines.taxi import taxi

    graph = taxi.graph()
    assert graph.nodes["deploy"].stage.options.cache is False
    assert graph.nodes["fit"].stage.options.cache is True


@stage
def note(path: str, counter: str) -> str:
    _bump(Path(counter))
    return path


@pipeline
def relative(path: str, counter: str):
    return note(path, counter)


def test_relative_paths_are_keyed_by_where_they_point(store, tmp_path: Path,  # noqa: ANN001
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    counter = str(tmp_path / "runs")
    for checkout in ("a", "b"):
        (tmp_path / checkout / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a")
    first = relative.run({"path": "data/taxi-s", "counter": counter}, store=store)
    again = relative.run({"path": "data/taxi-s", "counter": counter}, store=store)
    assert again.record.stage("note").status == "cached"  # the same checkout: reused

    monkeypatch.chdir(tmp_path / "b")  # another checkout, the same relative path
    other = relative.run({"path": "data/taxi-s", "counter": counter}, store=store)
    assert other.record.stage("note").status == "succeeded", "another checkout's output was reused"
    assert Path(counter).read_text() == "2"
    assert first.record.stage("note").cache_key != other.record.stage("note").cache_key


def test_which_values_key_as_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert key_of_path("data/x") == ("path", str(tmp_path / "data" / "x"))
    assert key_of_path("./x") == ("path", str(tmp_path / "x"))
    assert key_of_path(Path("x")) == ("path", str(tmp_path / "x"))
    for kept in ("/abs/path", "s3://bucket/key", "plain", 3, "taxi-tune"):
        assert key_of_path(kept) == kept
