"""Sources and sinks, found by name from ``read_*`` / ``write_*``.

To add a connector: a :class:`~connectors.base.Datasource` (or
:class:`~connectors.base.Datasink`) subclass in a module of its own here, its
name in :data:`SOURCES` (or :data:`SINKS`), a ``read_*`` function in
``airflowless/data/read_api.py`` (or a ``write_*`` method on ``Dataset``), and
tests that read or write real files or a real server (``tests/connectors``).

>>> from connectors import get_source
>>> get_source("parquet").__name__
'ParquetSource'
"""

from __future__ import annotations

import importlib
from typing import Any

from airflowless.errors import ConfigError

__all__ = ["get_source", "get_sink", "SOURCES", "SINKS"]

SOURCES: dict[str, str] = {
    "parquet": "connectors.parquet:ParquetSource",
    "csv": "connectors.csv:CSVSource",
    "json": "connectors.json:JSONSource",
    "text": "connectors.text:TextSource",
    "binary": "connectors.text:BinarySource",
    "sql": "connectors.sql:SQLSource",
    "memory": "connectors.memory:TablesSource",
    "range": "connectors.memory:RangeSource",
    "dask": "connectors.memory:DaskSource",
}
SINKS: dict[str, str] = {
    "parquet": "connectors.parquet:ParquetSink",
    "csv": "connectors.csv:CSVSink",
    "json": "connectors.json:JSONSink",
    "sql": "connectors.sql:SQLSink",
}


def _load(table: dict[str, str], kind: str, name: str) -> Any:
    if name not in table:
        raise ConfigError(f"no {kind} named {name!r}; known: {sorted(table)}")
    module, _, attr = table[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def get_source(name: str) -> Any:
    """The Datasource class registered as ``name``."""
    return _load(SOURCES, "source", name)


def get_sink(name: str) -> Any:
    """The Datasink class registered as ``name``."""
    return _load(SINKS, "sink", name)
