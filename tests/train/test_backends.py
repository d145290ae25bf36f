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


def test_the_xgboost_tracker_gives_the_arguments_xgboost_itself_would() -> None:
    """Rank 0 names the tracker's port itself (XGBoost's worker_args() waits for the tracker in 0.1 s steps):
    the arguments must be what XGBoost would give, and two ranks must connect with them."""
    import threading

    import numpy as np
    from xgboost import collective

    from airflowless.train.backends.xgboost import start_tracker

    tracker, args = start_tracker(2, "127.0.0.1", 30)
    try:
        assert args == tracker.worker_args()
        sums: list[int] = []

        def rank(r: int) -> None:
            with collective.CommunicatorContext(**args, dmlc_task_id=f"rank-{r}"):
                sums.append(int(collective.allreduce(np.array([r + 1]), collective.Op.SUM)[0]))

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert sums == [3, 3]
        tracker.wait_for(30)
    finally:
        tracker.free()


class _SlowPackageBackend(Backend):
    modules = ("slowpkg",)


def test_a_loop_whose_module_imports_the_preloaded_package_waits_for_the_preload(
        cluster_client: Any, tmp_path: Any, home: Any) -> None:
    """A rank must not load the user's loop while the backend's preload thread is inside the same package.

    ``slowpkg`` imports as torch does: its ``__init__`` takes a while, then imports a submodule that reads
    the package. The loop's module imports that submodule at its top (``import torch.nn as nn``). Loaded
    while the preload is half way through, one of the two imports fails and the rank dies (issue 29.1).
    """
    from airflowless.train import DataParallelTrainer, ScalingConfig

    package = tmp_path / "slowpkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import time\ntime.sleep(2.0)\nVALUE = 7\nfrom slowpkg import sub\nDOUBLE = sub.answer() * 2\n")
    (package / "sub.py").write_text("from slowpkg import VALUE\n\ndef answer():\n    return VALUE\n")
    (tmp_path / "slow_loop.py").write_text(
        "import slowpkg.sub\nimport slowpkg\nfrom airflowless import train\n\n"
        "def loop():\n    train.report({'value': slowpkg.DOUBLE})\n")

    cluster_client.run(_importable_from, str(tmp_path))
    _importable_from(str(tmp_path))
    try:
        import slow_loop  # type: ignore[import-not-found]

        trainer = DataParallelTrainer(slow_loop.loop, backend=_SlowPackageBackend(),
                                      scaling_config=ScalingConfig(num_workers=2))
        assert trainer.fit().metrics["value"] == 14
    finally:
        _importable_from(str(tmp_path), undo=True)
        cluster_client.run(_importable_from, str(tmp_path), undo=True)


def _importable_from(path: str, *, undo: bool = False) -> None:
    """Put ``path`` first on sys.path, or take it and the modules imported from it away again."""
    if not undo:
        sys.path.insert(0, path)
        return
    if path in sys.path:
        sys.path.remove(path)
    for name in [n for n, m in sys.modules.items() if (getattr(m, "__file__", None) or "").startswith(path)]:
        del sys.modules[name]
