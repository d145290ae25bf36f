"""The REST routes that take code: upload a pipeline's folder, submit a run of it, deploy it (over real HTTP).

Each needs the token; the module is imported only in child processes; what lands in the record is what
``airflowless submit`` and ``airflowless deploy`` would write, and the service's driver can load it.
"""

from __future__ import annotations

import io
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflowless.control.context import ControlContext
from airflowless.service.upload import materialize, pack
from airflowless.store import RunStatus, open_store
from tests.control.conftest import call

V1 = "airflowless/api/v1/"

_MODULE = '''
from airflowless import pipeline, stage

@stage
def rows(n_rows: int) -> int:
    return n_rows

@pipeline
def hourly(n_rows: int = 10, interval_start: str = "", interval_end: str = ""):
    return rows(n_rows)
'''


def _post(url: str, payload: bytes, *, token: str | None = "t0ken") -> tuple[int, Any]:
    return call(url, method="POST", token=token, body=payload)


@pytest.mark.usefixtures("home")
def test_a_folder_uploaded_then_submitted_and_deployed_over_http(tmp_path: Path, control_server: Any) -> None:
    url = f"sqlite:///{tmp_path / 'record.db'}"
    project = tmp_path / "project"
    (project / "pipelines").mkdir(parents=True)
    (project / "pipelines" / "__init__.py").write_text("")
    (project / "pipelines" / "hourly.py").write_text(_MODULE)
    archive = pack(project)
    store = open_store(url)
    base = control_server(ControlContext(url, token="t0ken")) + V1

    # the upload: the token, a module inside, a real and safe archive
    status, refused = _post(base + "pipeline-uploads?module=pipelines/hourly.py", archive, token=None)
    assert status == 401 and "actions need the cluster's token" in refused["error"], refused
    status, uploaded = _post(base + "pipeline-uploads?module=pipelines/hourly.py", archive)
    assert status == 200, uploaded
    assert uploaded["pipeline"] == "hourly" and uploaded["target"].startswith("submission:")
    assert uploaded["target"].endswith("#pipelines/hourly.py:hourly")
    assert Path(materialize(uploaded["target"]).rpartition(":")[0]).read_text() == _MODULE  # as a driver loads it
    assert _post(base + "pipeline-uploads?module=pipelines/other.py", archive)[0] == 400
    assert _post(base + "pipeline-uploads?module=../x.py", archive)[0] == 400
    assert _post(base + "pipeline-uploads?module=pipelines/hourly.py", b"not a tar.gz")[0] == 400
    sneaky = io.BytesIO()
    with tarfile.open(fileobj=sneaky, mode="w:gz") as tar:
        info = tarfile.TarInfo("../outside.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    status, answer = _post(base + "pipeline-uploads?module=pipelines/hourly.py", sneaky.getvalue())
    assert status == 400 and "cannot be unpacked safely" in answer["error"], answer
    broken = project / "pipelines" / "hourly.py"
    broken.write_text("import no_such_module_anywhere\n")
    status, answer = _post(base + "pipeline-uploads?module=pipelines/hourly.py", pack(project))
    assert status == 422 and "no_such_module_anywhere" in answer["error"], answer

    # a submission of the upload: parameters checked (text parsed as --param does), queued for the service
    submissions = base + "pipeline-submissions"
    status, queued = call(submissions, method="POST", token="t0ken",
                          body={"target": uploaded["target"], "params": {"n_rows": "5"}, "priority": 2})
    assert status == 200, queued
    run = store.get_run(queued["run_id"])
    assert (run.status, run.trigger, run.target, run.params, run.priority) == (
        RunStatus.QUEUED, "submit", uploaded["target"], {"n_rows": 5}, 2)
    status, answer = call(submissions, method="POST", token="t0ken",
                          body={"target": uploaded["target"], "params": {"n_rowz": 1}})
    assert status == 422 and "n_rowz" in answer["error"], answer
    assert call(submissions, method="POST", token="t0ken", body={"params": {}})[0] == 400
    assert call(submissions, method="POST", body={"target": uploaded["target"]})[0] == 401

    # a deployment of it, on a schedule: checked as `airflowless deploy` checks
    deployments = base + "pipeline-deployments"
    status, deployed = call(deployments, method="POST", token="t0ken",
                            body={"name": "hourly-up", "target": uploaded["target"], "every": 3600,
                                  "params": {"n_rows": 3}, "max_active_runs": 1})
    assert status == 200, deployed
    stored = store.get_pipeline_deployment("hourly-up")
    assert (stored["target"], stored["params"], stored["schedule"], stored["max_active_runs"]) == (
        uploaded["target"], {"n_rows": 3}, {"every": 3600.0}, 1)
    status, answer = call(deployments, method="POST", token="t0ken",
                          body={"name": "hourly-up", "target": uploaded["target"], "every": 3600})
    assert status == 422 and "exists" in answer["error"], answer
    status, answer = call(deployments, method="POST", token="t0ken",
                          body={"name": "bad-cron", "target": uploaded["target"], "cron": "every day"})
    assert status == 422 and "cron" in answer["error"], answer
    status, answer = call(deployments, method="POST", token="t0ken",
                          body={"name": "x", "target": uploaded["target"], "schedule": "0 3 * * *"})
    assert status == 400 and "schedule" in answer["error"], answer
    assert [d["name"] for d in call(deployments)[1]["deployments"]] == ["hourly-up"]
    store.close()


def test_an_upload_past_the_bound_is_refused_before_it_is_read(tmp_path: Path, control_server: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOWLESS_SUBMIT_MAX_MB", "0.001")  # read at each request
    base = control_server(ControlContext(f"sqlite:///{tmp_path / 'record.db'}", token="t0ken")) + V1
    request = urllib.request.Request(base + "pipeline-uploads?module=p.py", method="POST", data=b"x" * 5000,
                                     headers={"Authorization": "Bearer t0ken"})
    try:
        urllib.request.urlopen(request, timeout=30)
        status = 200
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status == 413
