"""Rolling updates on the real cluster, under load: serve.run again with a new version replaces the replicas
with no failed request; a new version that cannot start is rolled back while the old one serves on."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflowless import serve
from airflowless.serve.errors import ServeError


@serve.deployment(num_replicas=2, graceful_shutdown_timeout_s=5)
class Versioned:
    def __init__(self, version: str, fail: bool = False) -> None:
        if fail:
            raise RuntimeError(f"version {version} cannot load its model")
        self.version = version

    def __call__(self, request: Any) -> dict[str, str]:
        time.sleep(0.005)  # a little work, so requests are in flight when replicas change
        return {"version": self.version}


class _Load:
    """Clients sending requests in a loop until stopped: what the answers said (``label``), every failure."""

    def __init__(self, url: str, clients: int = 8, *, body: Any = None,
                 label: Callable[[Any], str] = lambda answer: str(answer["version"])) -> None:
        self.url, self.body, self.label, self.stop = url, body, label, threading.Event()
        self.seen: Counter[str] = Counter()
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                try:
                    answer = client.get(self.url) if self.body is None else client.post(self.url, json=self.body)
                    if answer.status_code != 200:
                        self.failures.append(f"{answer.status_code}: {answer.text[:200]}")
                    else:
                        self.seen[self.label(answer.json())] += 1
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))

    def __enter__(self) -> _Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def _wait_for(load: _Load, count: int) -> None:
    deadline = time.monotonic() + 30
    while sum(load.seen.values()) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_new_version_rolls_in_under_load_without_a_failed_request(serve_url: str) -> None:
    serve.run(Versioned.bind("v1"), name="rolling", route_prefix="/rolling")
    with _Load(f"{serve_url}/rolling") as load:
        _wait_for(load, 50)
        serve.run(Versioned.bind("v2"), name="rolling", route_prefix="/rolling")
        before = load.seen["v2"]
        _wait_for(load, sum(load.seen.values()) + 50)
    assert load.failures == [], load.failures[:5]
    assert load.seen["v1"] > 0 and load.seen["v2"] > before
    status = serve.status()["rolling"]["deployments"]["Versioned"]
    assert status["status"] == "HEALTHY" and status["running_replicas"] == 2
    assert {httpx.get(f"{serve_url}/rolling").json()["version"] for _ in range(20)} == {"v2"}
    serve.delete("rolling")


def test_a_version_that_cannot_start_is_rolled_back_and_the_old_one_serves_on(serve_url: str) -> None:
    serve.run(Versioned.bind("v1"), name="rollback", route_prefix="/rollback")
    with _Load(f"{serve_url}/rollback", clients=4) as load:
        _wait_for(load, 20)
        with pytest.raises(ServeError, match="version 1 rolled back to 0: .*v2 cannot load its model"):
            serve.run(Versioned.bind("v2", fail=True), name="rollback", route_prefix="/rollback")
        _wait_for(load, sum(load.seen.values()) + 20)
    assert load.failures == [], load.failures[:5]
    assert set(load.seen) == {"v1"}
    assert serve.status()["rollback"]["deployments"]["Versioned"]["status"] == "HEALTHY"
    serve.delete("rollback")


def test_moving_a_model_alias_rolls_the_deployment_to_the_version_it_points_at(serve_url: str, home: Path,
                                                                                tmp_path: Path) -> None:
    import numpy as np
    import pandas as pd
    import xgboost as xgb

    from airflowless import models
    from tests.serve.test_predictor import FEATURES, make_checkpoint

    first, _ = make_checkpoint(tmp_path / "v1")
    frame = pd.DataFrame(np.random.default_rng(1).normal(size=(300, 3)), columns=FEATURES)
    flipped = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(frame, label=(frame["trip_distance"] < 0)),
                        num_boost_round=5)  # the opposite model: its predictions tell the versions apart
    (tmp_path / "v2").mkdir()
    flipped.save_model(str(tmp_path / "v2" / "model.ubj"))
    second = str(tmp_path / "v2")
    models.set_alias("taxi", "champion", models.register("taxi", first).version)
    later = models.register("taxi", second).version
    row = {"trip_distance": 0.3, "fare_amount": 1.0, "hour": -0.5}
    serve.run(serve.PredictorDeployment.bind("models:/taxi@champion"), name="follow", route_prefix="/follow")
    with _Load(f"{serve_url}/follow/predict", clients=4, body=row,
               label=lambda answer: f"{answer['predictions'][0]:.6f}") as load:
        _wait_for(load, 20)
        (before,) = set(load.seen)
        models.set_alias("taxi", "champion", later)
        deadline = time.monotonic() + 60
        while len(load.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        _wait_for(load, sum(load.seen.values()) + 20)
    assert load.failures == [], load.failures[:5]
    (after,) = set(load.seen) - {before}
    assert httpx.post(f"{serve_url}/follow/predict", json=row).json()["predictions"][0] == pytest.approx(float(after), abs=1e-5)
    serve.delete("follow")
