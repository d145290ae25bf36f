"""Fuzz the API from its own OpenAPI document (schemathesis) on the embedded cluster's real scheduler.

Every generated read is sent once (reads are open on loopback); every action
three times: without a token, with a wrong one and with the cluster's. No answer is a server error
(503 only as a JSON error: "nothing on the cluster listens for this action"),
none carries a traceback, every answer is JSON, and actions without the token
or with a wrong one get 401 / 403 (or 400 first, when tornado cannot parse the body as its Content-Type says).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require_module

schemathesis: Any = require_module("schemathesis")
hypothesis: Any = require_module("hypothesis")

from airflowless.control import mount  # noqa: E402
from airflowless.control.openapi import document  # noqa: E402
from airflowless.store import open_store  # noqa: E402

schema = schemathesis.openapi.from_dict(document())
schema.config.generation.update(modes=list(schemathesis.GenerationMode), with_security_parameters=False)


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small record (a run, an experiment with a trial, a deployment) shared by the fuzzed operations."""
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'record.db'}"
    store = open_store(url)
    run_id = store.create_run("fuzzed", module="m", params={"n": 1})
    store.add_stages(run_id, [{"node": "a", "stage": "a", "upstream": [], "cache_key": "k", "status": "running"}])
    experiment_id = store.create_experiment("fuzz", kind="tune", config={}, metric="loss", mode="min")
    trial_id = store.add_trial(experiment_id, "t0", config={"x": 1}, status="running")
    store.add_metrics(trial_id, 1, {"loss": 1.0})
    store.add_checkpoint(trial_id, 1, "file:///nowhere", {"loss": 1.0})
    store.record_deployment("app", "dep", route_prefix="/", num_replicas=1, http_address=None, config={})
    store.close()
    return url


@pytest.fixture(scope="module")
def session() -> Iterator[Any]:
    import requests

    with requests.Session() as session:
        yield session


@pytest.fixture
def target(cluster_client: Any, record: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """The embedded scheduler's control plane, reading ``record`` (the driver's store now); ``(base, token)``."""
    monkeypatch.setenv("AIRFLOWLESS_DB", record)
    ctx = mount.installed(cluster_client.cluster.scheduler)
    assert ctx is not None and ctx.token
    return mount.link(cluster_client.cluster.scheduler).removesuffix("/airflowless/"), ctx.token


def _sound(response: Any, what: str) -> None:
    text = response.text
    if response.status_code == 304:  # a generated If-None-Match of "*" (or the body's ETag): no body, by rule
        etag = {name.lower(): value for name, value in response.headers.items()}.get("etag")
        assert text == "" and etag, f"{what}: a 304 with {text[:300]!r} and ETag {etag!r}"
        return
    assert response.status_code < 500 or (response.status_code == 503 and set(response.json()) == {"error"}), \
        f"{what}: {response.status_code} {text[:300]}"
    assert "Traceback" not in text and 'File "' not in text, f"{what}: a traceback in {text[:300]}"
    assert isinstance(response.json(), dict), f"{what}: not a JSON object: {text[:300]}"


@pytest.mark.timeout(120)
@schema.parametrize()
@hypothesis.settings(max_examples=30, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_fuzzed_requests_get_sound_answers(case: Any, target: tuple[str, str], session: Any) -> None:
    base, token = target
    case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    if case.method.upper() != "POST":  # a read on loopback: open, the token plays no part (or a 405)
        _sound(case.call(session=session, base_url=base), "a read")
        return
    missing = case.call(session=session, base_url=base)
    _sound(missing, "no token")
    wrong = case.call(session=session, base_url=base, headers={"Authorization": f"Bearer {token[::-1]}"})
    _sound(wrong, "wrong token")
    if not _malformed(missing):
        assert (missing.status_code, wrong.status_code) == (401, 403), (missing.text, wrong.text)
    _sound(case.call(session=session, base_url=base, headers={"Authorization": f"Bearer {token}"}), "the token")


def _malformed(response: Any) -> bool:
    """tornado refuses a body its Content-Type does not describe before any handler (and so the token) runs."""
    return response.status_code == 400 and response.json()["error"].startswith("Invalid body")
