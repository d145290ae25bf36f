"""A cached stage is reused only while what it did still holds: its effect, the files it read, its age."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflowless import pipeline, stage
from airflowless.errors import ResumeError

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


@stage(cache_valid=answers, cache_key=lambda counter: counter.encode())  # the counter by its name: it writes there
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


def _counted(path: str, counter: str) -> str:
    return path  # the output depends on the path's files; the counter is the test's, written by each run


@stage(cache_key=_counted)
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


@stage
def count_rows(folder: str) -> int:
    return sum(len(p.read_text().splitlines()) for p in sorted(Path(folder.removeprefix("file://")).rglob("*.csv")))


@stage(cache_ttl=1.5)
def fresh(value: int) -> float:
    import time

    return time.time() + value


@pipeline
def reading(folder: str, value: int = 0):
    return count_rows(folder), fresh(value)


def test_a_changed_added_or_removed_file_is_a_miss_and_old_outputs_expire(store, tmp_path: Path) -> None:  # noqa: ANN001
    import time

    data = tmp_path / "days"
    (data / "day=1").mkdir(parents=True)
    (data / "day=1" / "a.csv").write_text("1\n2\n")
    for url in (str(data), f"file://{data}"):
        assert reading.run({"folder": url}, store=store).value[0] == 2
        again = reading.run({"folder": url}, store=store)
        assert again.record.stage("count_rows").status == "cached" and again.value[0] == 2

    (data / "day=2").mkdir()
    (data / "day=2" / "b.csv").write_text("3\n")  # a new day lands: the old count is stale
    added = reading.run({"folder": str(data)}, store=store)
    assert added.record.stage("count_rows").status == "succeeded" and added.value[0] == 3
    (data / "day=1" / "a.csv").write_text("1\n2\n3\n4\n")  # a file rewritten
    assert reading.run({"folder": str(data)}, store=store).value[0] == 5
    (data / "day=2" / "b.csv").unlink()
    assert reading.run({"folder": str(data)}, store=store).value[0] == 4

    # cache_ttl: an output is reused until it is older than that, counted from the run that made it
    made = reading.run({"folder": str(data), "value": 7}, store=store)
    reused = reading.run({"folder": str(data), "value": 7}, store=store)
    assert reused.record.stage("fresh").status == "cached" and reused.value[1] == made.value[1]
    time.sleep(max(0.0, made.value[1] - 7 + 1.6 - time.time()))
    late = reading.run({"folder": str(data), "value": 7}, store=store)
    assert late.record.stage("fresh").status == "succeeded" and late.value[1] > made.value[1]
    assert late.record.stage("count_rows").status == "cached"


@stage
def first_half(value: int) -> int:
    return value


@stage(cache=False)
def publish(value: int, counter: str) -> str:
    return f"published {value} as #{_bump(Path(counter))}"


@stage
def announce(url: str, flag: str) -> str:
    if Path(flag).exists():
        raise ValueError("the flag file says fail")
    return url


@pipeline
def publishing(counter: str, flag: str):
    return announce(publish(first_half(1), counter), flag)


def test_a_resume_runs_cache_false_stages_again_and_a_succeeded_run_has_nothing_to_resume(  # noqa: ANN001
        store, tmp_path: Path) -> None:
    from airflowless.errors import PipelineRunError

    counter, flag = str(tmp_path / "published"), tmp_path / "fail"
    flag.touch()
    params = {"counter": counter, "flag": str(flag)}
    with pytest.raises(PipelineRunError) as info:
        publishing.run(params, store=store)
    flag.unlink()
    resumed = publishing.resume(info.value.run_id, store=store)
    statuses = {s.node: s.status for s in resumed.record.stages}
    assert statuses == {"first_half": "cached", "publish": "succeeded", "announce": "succeeded"}, statuses
    assert resumed.value == "published 1 as #2", "the resume must publish again: what it published may be gone"
    with pytest.raises(ResumeError, match=f"run {resumed.run_id} succeeded: there is nothing to resume"):
        publishing.resume(resumed.run_id, store=store)
