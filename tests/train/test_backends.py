"""Backend.preload: the framework a backend's ranks import is loaded on the workers ahead of them."""

from __future__ import annotations

import sys
from typing import Any

from airflowless.train.backends.base import Backend
from airflowless.train.backends.xgboost import XGBoostBackend
from tests.support.eventually import eventually

MODULE = "tabnanny"  # a standard module nothing in a worker imports


def _imported(name: str) -> bool:
    return name in sys.modules


class _TabnannyBackend(Backend):
    modules = (MODULE,)


def test_preload_imports_the_backend_modules_on_every_worker_without_waiting(cluster_client: Any) -> None:
    assert not any(cluster_client.run(_imported, MODULE).values()), "the test needs workers without it"
    _TabnannyBackend().preload(cluster_client)
    eventually(lambda: all(cluster_client.run(_imported, MODULE).values()),
               message=lambda: f"{MODULE} on the workers: {cluster_client.run(_imported, MODULE)}")


def test_the_xgboost_backend_preloads_what_its_ranks_import() -> None:
    assert {"xgboost.collective", "xgboost.tracker"} <= set(XGBoostBackend.modules)
    assert Backend.modules == ()
