"""Datasets a stage returns with their blocks on the cluster are written as parquet before they are kept.

A materialized Dataset (or a split of one) holds Dask futures: its blocks
live on this cluster's workers and die with it. A stage output is read back
by later runs on other clusters, so such a Dataset is written under the
output's folder in the run's storage and replaced by a Dataset reading those
files. Lazy Datasets (plans that read a source) are kept as they are.
Datasets inside lists, tuples and dicts are found too.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import cloudpickle

from ..names import join_under

__all__ = ["persist_datasets", "holds_futures"]


class _FutureFinder(cloudpickle.CloudPickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self.found = False

    def persistent_id(self, obj: Any) -> str | None:
        from distributed import Future

        if isinstance(obj, Future):
            self.found = True
            return "future"  # stands in for it: this pickle is only a probe
        return None


def holds_futures(value: Any) -> bool:
    """True when pickling ``value`` would pickle a Dask future."""
    finder = _FutureFinder(io.BytesIO())
    finder.dump(value)
    return finder.found


def persist_datasets(value: Any, folder: str) -> Any:
    """``value`` with every Dataset that holds cluster blocks written as parquet under ``folder`` and read back.

    ``folder`` is a local path or fsspec URL; each Dataset gets a fresh sub-folder,
    so a retried stage never mixes its files with an earlier attempt's.
    """
    from ..data import Dataset, read_parquet
    from ..runtime import cluster_client

    def visit(item: Any) -> Any:
        if isinstance(item, Dataset):
            if not holds_futures(item):
                return item
            target = join_under(folder, f"dataset-{uuid.uuid4().hex[:12]}")
            with cluster_client():
                item.write_parquet(target)
            return read_parquet(target)
        if isinstance(item, list):
            return [visit(x) for x in item]
        if isinstance(item, tuple) and not hasattr(item, "_fields"):
            return tuple(visit(x) for x in item)
        if isinstance(item, dict):
            return {k: visit(x) for k, x in item.items()}
        return item

    return visit(value)
