"""File and partition triggers: one run per new folder (or file), once, local and on S3, whole before it is taken.

The end-to-end tests run the service as users do, a process of its own whose
drivers join the session's cluster; files land in a real folder and in a
bucket of moto's S3 server. Two processes race for 60 partitions on one
PostgreSQL record, as two services would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflowless.errors import ConfigError
from airflowless.service.deploy import deploy
from airflowless.service.files import FileSpec, filesystem
from airflowless.store import RunStatus, open_store
from tests.support import s3
from tests.support.eventually import eventually
from tests.support.processes import start_service, stop
from tests.support.processes import start_service as _service
from tests.support.s3 import s3_client

s3_endpoint = s3.s3_endpoint  # the fixture

_MODULE = '''
from datetime import date
from airflowless import pipeline, stage

@stage
def score(day: date, path: str) -> str:
    return f"{day.isoformat()} from {path}"

@pipeline
def score_day(day: date, path: str = ""):
    return score(day, path)
'''


def _write(path: Path, text: str = "x", *, age: float = 0.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if age:
        moment = time.time() - age
        os.utime(path, (moment, moment))


# -- patterns, matches, when a match is whole ----------------------------------------------------------------------

@pytest.mark.parametrize("pattern, options, expected", [
    ("/data/taxi/", {}, "needs a wildcard"),
    ("/data/**/x.csv", {}, "not '**'"),
    ("/data/in/*.csv", {"marker": "_SUCCESS"}, "end the pattern with '/'"),
    ("/data/date=*/", {"marker": "a/b"}, "a file name inside each partition"),
    ("/data/date=*/", {"batch": True}, "already starts one run per folder"),
    ("/data/date=*/", {"params": {"day": "dt"}}, "does not capture; it captures ['date', 'path']"),
    ("/data/date=*/", {"quiet_s": -1}, "--quiet-for is a number of seconds"),
    ("/data/date=*/", {"poll_s": 0.01}, "--poll is at least 0.1 s"),
])
def test_a_pattern_that_cannot_work_is_refused_with_what_was_expected(pattern: str, options: dict[str, Any],
                                                                       expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        FileSpec.parse(pattern, **options)
    assert expected in str(caught.value)


def test_fields_come_from_hive_segments_and_placeholders_and_every_match_has_its_path() -> None:
    spec = FileSpec.parse("s3://lake/events/year=*/{kind}_*.json")
    assert spec.fields == ("year", "kind", "path") and not spec.partitions and spec.root == "s3://lake/events"
    assert spec.match("s3://lake/events/year=2026/click_0001.json") == (
        "s3://lake/events/year=2026/click_0001.json",
        {"year": "2026", "kind": "click", "path": "s3://lake/events/year=2026/click_0001.json"})
    assert spec.match("s3://lake/events/year=2026/deep/click_1.json") is None  # '*' stays within a segment
    assert FileSpec.parse("/in/*.csv", batch=True).fields == ("paths",)


def test_a_folder_is_whole_once_quiet_or_once_its_marker_appears(tmp_path: Path) -> None:
    quiet = FileSpec.parse(f"{tmp_path}/date=*/", quiet_s=2.0)
    _write(tmp_path / "date=1" / "a.csv", age=10)
    _write(tmp_path / "date=1" / "sub" / "b.csv", age=5)
    _write(tmp_path / "date=2" / "a.csv", age=10)
    _write(tmp_path / "date=2" / "b.csv")  # still being written
    found, wake = quiet.scan(filesystem(quiet))
    assert sorted(found) == [f"{tmp_path}/date=1/", f"{tmp_path}/date=2/"]
    assert found[f"{tmp_path}/date=1/"].files == 2 and found[f"{tmp_path}/date=1/"].ready
    assert not found[f"{tmp_path}/date=2/"].ready
    assert wake is not None and 0 < wake - time.time() <= 2.0  # looked at again when it may be quiet
    assert list(quiet.scan(filesystem(quiet), skip={f"{tmp_path}/date=1/"})[0]) == [f"{tmp_path}/date=2/"]
    (tmp_path / "date=3").write_text("a file, not a folder")
    assert f"{tmp_path}/date=3/" not in quiet.scan(filesystem(quiet))[0]

    marked = FileSpec.parse(f"{tmp_path}/date=*/", marker="_SUCCESS")
    found, wake = marked.scan(filesystem(marked))
    assert not any(m.ready for m in found.values()) and wake is None  # old, but not marked
    _write(tmp_path / "date=2" / "_SUCCESS")
    found, _ = marked.scan(filesystem(marked))
    assert [k for k, m in found.items() if m.ready] == [f"{tmp_path}/date=2/"]


def test_deploy_refuses_a_missing_root_and_parameters_the_pipeline_does_not_take(tmp_path: Path, store: Any) -> None:
    module = tmp_path / "score_day.py"
    module.write_text(_MODULE)
    with pytest.raises(ConfigError, match="does not exist, so"):
        deploy(str(module), "a", on_new_files=FileSpec.parse(f"{tmp_path}/nowhere/date=*/", params={"day": "date"}),
               store=store)
    (tmp_path / "taxi").mkdir()
    with pytest.raises(ConfigError, match=r"needs \['day'\]: set each from the match with --param-from-match day="):
        deploy(str(module), "a", on_new_files=f"{tmp_path}/taxi/date=*/", store=store)
    with pytest.raises(ConfigError, match="sets \\['when'\\], which pipeline 'score_day' does not take"):
        deploy(str(module), "a", on_new_files=FileSpec.parse(f"{tmp_path}/taxi/date=*/", params={"when": "date"}),
               store=store)
    with pytest.raises(ConfigError, match="one trigger"):
        deploy(str(module), "a", every=60, on_new_files=FileSpec.parse(f"{tmp_path}/taxi/date=*/",
                                                                       params={"day": "date"}), store=store)
    _write(tmp_path / "taxi" / "date=yesterday" / "a.csv", age=5)  # cannot be a date
    with pytest.raises(ConfigError, match="does not suit the pipeline's parameters.*expects date"):
        deploy(str(module), "a", on_new_files=FileSpec.parse(f"{tmp_path}/taxi/date=*/", params={"day": "date"}),
               store=store)
    assert store.list_pipeline_deployments() == []


def test_two_takers_of_the_same_match_queue_one_run(tmp_path: Path, store: Any) -> None:
    spec = FileSpec.parse(f"{tmp_path}/date=*/", params={"day": "date"})
    store.create_pipeline_deployment("d", pipeline="p", target="/x/p.py:p", params={}, schedule=None,
                                     on_files=spec.to_json())
    deployment = store.get_pipeline_deployment("d")
    _write(tmp_path / "date=1" / "a.csv", age=5)
    (match,) = spec.scan(filesystem(spec))[0].values()
    first = store.take_matches(deployment, [match], spec.values([match]), "new folder")
    assert first is not None and store.take_matches(deployment, [match], spec.values([match]), "new folder") is None
    assert store.get_run(first).params == {"day": "1"} and store.get_run(first).trigger == "files"
    assert store.trigger_history("d")["taken"] == 1


# -- the service, end to end ----------------------------------------------------------------------------------------

def _runs(store: Any, name: str) -> list[Any]:
    deployment = store.get_pipeline_deployment(name)
    return sorted((r for r in store.list_runs(limit=500) if r.deployment_id == deployment["id"]), key=lambda r: r.id)


@pytest.mark.usefixtures("home")
def test_each_new_local_folder_runs_once_whole_even_when_it_lands_while_the_service_is_down(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "score_day.py"
    module.write_text(_MODULE)
    taxi = tmp_path / "taxi"
    _write(taxi / "date=2024-01-01" / "part-0.csv", age=60)  # there before: left alone
    store = open_store(db)
    deploy(str(module), "score-days", on_new_files=FileSpec.parse(f"{taxi}/date=*/", params={"day": "date"},
                                                                   quiet_s=1.0), store=store)
    (tmp_path / "marked").mkdir()
    deploy(str(module), "marked", on_new_files=FileSpec.parse(f"{tmp_path}/marked/date=*/", params={"day": "date"},
                                                               marker="_SUCCESS"), store=store)
    log = tmp_path / "service.log"
    address = cluster_client.scheduler.address
    service = _service(db, address, log)
    try:
        # a folder written over 2.5 s, a file every 0.25 s: never taken half-written
        for part in range(10):
            _write(taxi / "date=2024-01-02" / f"part-{part}.csv")
            time.sleep(0.25)
        runs = eventually(lambda: _runs(store, "score-days"), timeout=60, message=lambda: log.read_text()[-3000:])
        assert len(runs) == 1 and runs[0].params == {"day": "2024-01-02", "path": f"{taxi}/date=2024-01-02/"}
        assert runs[0].trigger_detail == f"new folder {taxi}/date=2024-01-02/ (10 files)"
        eventually(lambda: store.get_run(runs[0].id).status == RunStatus.SUCCEEDED, timeout=60,
                   message=lambda: log.read_text()[-3000:])
        assert "2024-01-02 from" in (store.get_run(runs[0].id).stage("score").output_summary or "")

        # a marked folder waits for its marker however quiet it is
        _write(tmp_path / "marked" / "date=2024-01-05" / "part-0.csv", age=30)
        time.sleep(2.0)
        assert _runs(store, "marked") == []
        _write(tmp_path / "marked" / "date=2024-01-05" / "_SUCCESS")
        eventually(lambda: len(_runs(store, "marked")) == 1, timeout=30, message=lambda: log.read_text()[-3000:])

        service.send_signal(signal.SIGKILL)
        service.wait(10)
        _write(taxi / "date=2024-01-03" / "part-0.csv")  # lands while no service runs
        _write(taxi / "date=2024-01-02" / "late.csv")  # a late file in a folder already taken: starts nothing
        service = _service(db, address, log)
        eventually(lambda: len(_runs(store, "score-days")) == 2, timeout=60, message=lambda: log.read_text()[-3000:])
        time.sleep(2.0)  # a service started again takes nothing twice
        runs = _runs(store, "score-days")
        assert [r.params["day"] for r in runs] == ["2024-01-02", "2024-01-03"]
        eventually(lambda: store.get_run(runs[1].id).status == RunStatus.SUCCEEDED, timeout=60)
        history = store.trigger_history("score-days")
        assert history["taken"] == 2 and history["existing"] == 1
        assert [entry["run_id"] for entry in history["last"]] == [runs[1].id, runs[0].id]
    finally:
        stop(service)


_RACER = """
import json, sys, time
from airflowless.service.files import FileSpec, filesystem
from airflowless.store import open_store

url, folder = sys.argv[1], sys.argv[2]
store = open_store(url)
deployment = store.get_pipeline_deployment("racing")
spec = FileSpec.from_json(deployment["on_files"])
taken = []
for _ in range(3):
    for match in spec.scan(filesystem(spec))[0].values():
        run_id = store.take_matches(deployment, [match], spec.values([match]), match.key)
        if run_id is not None:
            taken.append(run_id)
print("RESULT " + json.dumps(taken))
"""


def test_two_services_on_postgresql_racing_for_60_folders_take_each_once(postgres_url: str, tmp_path: Path) -> None:
    store = open_store(postgres_url)
    spec = FileSpec.parse(f"{tmp_path}/parts/n=*/", quiet_s=0)
    for n in range(60):
        _write(tmp_path / "parts" / f"n={n}" / "a.csv")
    store.create_pipeline_deployment("racing", pipeline="p", target="/x/p.py:p", params={}, schedule=None,
                                     on_files=spec.to_json())
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    racers = [subprocess.Popen([sys.executable, str(script), postgres_url, str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]
    taken: list[int] = []
    for racer in racers:
        out, err = racer.communicate(timeout=300)
        assert racer.returncode == 0, out + err
        taken += json.loads(out.splitlines()[-1].removeprefix("RESULT "))
    assert len(taken) == 60 and Counter(taken).most_common(1)[0][1] == 1
    assert sorted(store.get_run(run_id).trigger_detail for run_id in taken) == sorted(
        f"{tmp_path}/parts/n={n}/" for n in range(60))
    assert store.trigger_history("racing", limit=100)["taken"] == 60


@pytest.mark.usefixtures("home")
def test_new_partitions_in_an_s3_bucket_run_once_each_within_a_poll(
        cluster_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_endpoint: str) -> None:
    pytest.importorskip("s3fs")
    credentials = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
                   "AWS_ENDPOINT_URL": s3_endpoint}
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    client = s3_client(s3_endpoint)
    client.create_bucket(Bucket="taxi-days")
    client.put_object(Bucket="taxi-days", Key="taxi/date=2024-01-01/part-0.csv", Body=b"x")
    time.sleep(2.0)  # S3 says when to the second: quiet by now, so there before the deployment (left alone)
    db = f"sqlite:///{tmp_path / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", db)
    module = tmp_path / "score_day.py"
    module.write_text(_MODULE)
    store = open_store(db)
    deploy(str(module), "s3-days", on_new_files=FileSpec.parse("s3://taxi-days/taxi/date=*/",
                                                                params={"day": "date"}, poll_s=0.5),
           store=store)
    log = tmp_path / "service.log"
    address = cluster_client.scheduler.address
    service = _service(db, address, log, credentials)
    try:
        for part in range(3):
            client.put_object(Bucket="taxi-days", Key=f"taxi/date=2024-01-02/part-{part}.csv", Body=b"x")
        eventually(lambda: _runs(store, "s3-days"), timeout=60, message=lambda: log.read_text()[-3000:])
        service.send_signal(signal.SIGKILL)
        service.wait(10)
        client.put_object(Bucket="taxi-days", Key="taxi/date=2024-01-03/part-0.csv", Body=b"x")
        service = _service(db, address, log, credentials)
        eventually(lambda: len(_runs(store, "s3-days")) == 2, timeout=60, message=lambda: log.read_text()[-3000:])
        time.sleep(2.0)
        runs = _runs(store, "s3-days")
        assert [(r.params["day"], r.params["path"]) for r in runs] == [
            ("2024-01-02", "s3://taxi-days/taxi/date=2024-01-02/"), ("2024-01-03", "s3://taxi-days/taxi/date=2024-01-03/")]
        assert runs[0].trigger_detail == "new folder s3://taxi-days/taxi/date=2024-01-02/ (3 files)"
        for run in runs:
            eventually(lambda run=run: store.get_run(run.id).status == RunStatus.SUCCEEDED, timeout=60,
                       message=lambda: log.read_text()[-3000:])
    finally:
        stop(service)


@pytest.mark.usefixtures("home")
def test_the_cli_deploys_the_day_pipeline_on_new_day_folders_and_refuses_what_cannot_match(
        cluster_client: Any, tmp_path: Path) -> None:
    from pipelines.score_day import land_day

    module = str(Path(__file__).parents[2] / "pipelines" / "score_day.py")
    root = tmp_path / "taxi-days"
    root.mkdir()
    db = f"sqlite:///{tmp_path / 'record.db'}"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "airflowless.cli", *args, "--db", db], capture_output=True,
                              text=True, timeout=120)

    wrong = cli("deploy", module, "--name", "score-days", "--on-new-files", f"{root}/date=*/",
                "--param-from-match", "day=dt")
    assert wrong.returncode == 2 and "names field(s) ['dt'] the pattern" in wrong.stderr
    orphan = cli("deploy", module, "--name", "score-days", "--marker", "_SUCCESS")
    assert orphan.returncode == 2 and "add --on-new-files PATTERN" in orphan.stderr
    made = cli("deploy", module, "--name", "score-days", "--on-new-files", f"{root}/date=*/",
               "--param-from-match", "day=date")
    assert made.returncode == 0, made.stderr
    assert f"next run for each new folder matching {root}/date=*/ (once quiet for 0.5 s)" in made.stdout
    assert "each new folder" in cli("deployments", "list").stdout

    log = tmp_path / "service.log"
    service = _service(db, cluster_client.scheduler.address, log)
    try:
        store = open_store(db)
        land_day(str(root), "2026-11-03")
        (run,) = eventually(lambda: _runs(store, "score-days"), timeout=60, message=lambda: log.read_text()[-3000:])
        done = eventually(lambda: store.get_run(run.id) if store.get_run(run.id).status in RunStatus.TERMINAL else None,
                          timeout=90, message=lambda: log.read_text()[-3000:])
        assert done.status == RunStatus.SUCCEEDED, done.error
        summary = done.stage("score").output_summary or ""
        assert "'day': '2026-11-03'" in summary and "'trips': " in summary
        shown = cli("runs", "show", str(run.id)).stdout
        assert f"started by the service: files: new folder {root}/date=2026-11-03/ (1 file)" in shown
    finally:
        stop(service)


@pytest.mark.usefixtures("home")
def test_two_service_processes_on_postgresql_queue_one_run_per_new_folder(
        cluster_client: Any, postgres_url: str, tmp_path: Path) -> None:
    module = tmp_path / "score_day.py"
    module.write_text(_MODULE)
    (tmp_path / "lake").mkdir()
    store = open_store(postgres_url)
    store.set_pool("held", 0)  # the runs stay queued: what is counted is what the services queued
    deploy(str(module), "racing", pool="held", store=store,
           on_new_files=FileSpec.parse(f"{tmp_path}/lake/date=*/", params={"day": "date"}, quiet_s=0.2))
    logs = [tmp_path / "one.log", tmp_path / "two.log"]
    services = [start_service(postgres_url, cluster_client.scheduler.address, log) for log in logs]
    try:
        eventually(lambda: len(store.live_services()) == 2, timeout=60,
                   message=lambda: "".join(log.read_text()[-1500:] for log in logs))
        time.sleep(1.5)  # both watching
        for n in range(30):
            _write(tmp_path / "lake" / f"date=2024-02-{n + 1:02d}" / "part-0.csv")
        eventually(lambda: len(store.queued_runs()) >= 30, timeout=60,
                   message=lambda: "".join(log.read_text()[-1500:] for log in logs))
        time.sleep(2.0)  # and no more
    finally:
        for service in services:
            stop(service)
    days = Counter(run.params["day"] for run in store.queued_runs())
    assert len(days) == 30 and set(days.values()) == {1}
    queued = [line for log in logs for line in log.read_text().splitlines() if "queued for new folder" in line]
    assert len(queued) == 30  # between them, each folder once
