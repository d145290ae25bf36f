"""A pytest fixture factory that starts a real process cluster and stops it afterwards.

>>> from tests.support.process_cluster import process_cluster_fixture
>>> cluster = process_cluster_fixture(n_workers=2, resources={"CPU": 1})  # a fixture named "cluster"
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest

from airflowless.runtime.processes import (
    ProcessCluster,
    start_process_cluster,
    stop_process_cluster,
)

__all__ = ["process_cluster_fixture"]

Scope = Literal["function", "class", "module", "package", "session"]


def process_cluster_fixture(
    *, scope: Scope = "module", **start_kwargs: Any
) -> Callable[..., Iterator[ProcessCluster]]:
    """A fixture yielding a started :class:`ProcessCluster`, stopped at teardown.

    ``start_kwargs`` go to :func:`start_process_cluster`; logs go to a pytest
    temporary folder unless ``log_dir`` is given. Assign the result to a
    module-level name: that name is the fixture's name.
    """

    @pytest.fixture(scope=scope)
    def _process_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
        kwargs = {"log_dir": tmp_path_factory.mktemp("cluster-logs"), **start_kwargs}
        cluster = start_process_cluster(**kwargs)
        try:
            yield cluster
        finally:
            stop_process_cluster(cluster)

    return _process_cluster
