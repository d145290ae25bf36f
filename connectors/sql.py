"""SQL databases through SQLAlchemy: read a query (optionally in ranges of a column), write a table.

Read tasks and write tasks each open their own engine on the worker (no
pooled connections outlive a task). ``postgresql://`` URLs use psycopg 3.
User values always travel as bound parameters; only identifiers (the table,
the partition column) enter the SQL text, quoted by the database's dialect.

>>> import pyarrow as pa, tempfile
>>> url = f"sqlite:///{tempfile.mkdtemp()}/example.db"
>>> sink = SQLSink("points", url)
>>> sink.prepare(); sink.write(pa.table({"id": [1, 2, 3]}), 0).rows
3
>>> source = SQLSource("SELECT * FROM points", url, parallelism=2, partition_column="id")
>>> sorted(r["id"] for task in source.plan() for t in source.read(task) for r in t.to_pylist())
[1, 2, 3]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from airflowless.errors import AirflowlessError, ConfigError

from .base import Datasink, Datasource, ReadTask, WriteResult
from .parquet import ReadError

__all__ = ["SQLSource", "SQLSink", "TableExistsError"]

IF_EXISTS = ("append", "replace", "fail")
DEFAULT_PARTITIONS = 4
# What SQLAlchemy's text() would take for a bind parameter (":name"); escaped in user SQL.
_BIND = re.compile(r"(?<![:\w\\]):(?=\w)")


class TableExistsError(AirflowlessError, ValueError):
    """``write_sql(..., if_exists="fail")`` found the table already there."""


def engine_for(connection_url: str) -> Any:
    """A SQLAlchemy engine without a pool; ``postgresql://`` means psycopg 3.

    >>> engine_for("postgresql://u@localhost/db").url.drivername
    'postgresql+psycopg'
    """
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    url = sa.engine.make_url(connection_url)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return sa.create_engine(url, poolclass=NullPool)


def _safe_url(connection_url: str) -> str:
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(connection_url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


class SQLSource(Datasource):
    """Rows of a query; with ``partition_column``, ``parallelism`` range queries read in parallel.

    Planning asks the database for the column's MIN and MAX and splits that
    span into equal ranges (the first also takes NULLs, the last has no upper bound),
    so every row is read exactly once. Without a column, one task reads all.

    >>> SQLSource("SELECT * FROM trips", "postgresql://u@db/x",
    ...           parallelism=8, partition_column="trip_id")  # doctest: +SKIP
    """

    name = "sql"

    def __init__(self, sql: str, connection_url: str, *, parallelism: int | None = None,
                 partition_column: str | None = None) -> None:
        if parallelism is not None and parallelism < 1:
            raise ConfigError(f"read_sql parallelism must be >= 1, got {parallelism}")
        if parallelism not in (None, 1) and partition_column is None:
            raise ConfigError(f"read_sql(parallelism={parallelism}) needs partition_column=...: the column "
                             "whose value ranges split the query into parallel reads")
        self.sql = sql.strip().rstrip(";")
        self.connection_url = connection_url
        self.parallelism = parallelism
        self.partition_column = partition_column

    def plan(self, *, columns: Sequence[str] | None = None, filter: Any = None,
             parallelism: int | None = None) -> list[ReadTask]:
        if self.partition_column is None:
            return [ReadTask(name=f"sql[{self.sql[:60]}]", payload=None)]
        lo, hi = self._span()
        try:
            ranges = _ranges(lo, hi, self.parallelism or parallelism or DEFAULT_PARTITIONS)
        except TypeError:
            raise ReadError(f"partition column {self.partition_column!r} holds {type(lo).__name__} values "
                            f"({lo!r}..{hi!r}), which cannot be split into ranges; use a numeric, date "
                            "or timestamp column") from None
        return [ReadTask(name=f"sql[{self.partition_column} in {a!r}..{b!r}]", payload=(a, b)) for a, b in ranges]

    def _span(self) -> tuple[Any, Any]:
        import sqlalchemy as sa

        engine = engine_for(self.connection_url)
        column = _quote(engine, self.partition_column or "")
        try:
            with engine.connect() as conn:
                row = conn.execute(sa.text(f"SELECT MIN({column}), MAX({column}) FROM ({_escape(self.sql)}) AS q"))
                lo, hi = row.one()
        except sa.exc.SQLAlchemyError as exc:
            raise ReadError(f"cannot find the range of partition column {self.partition_column!r} of "
                            f"{self.sql!r} at {_safe_url(self.connection_url)}: {exc}") from exc
        finally:
            engine.dispose()
        return lo, hi

    def read(self, task: ReadTask, *, columns: Sequence[str] | None = None,
             filter: Any = None) -> Iterable[pa.Table]:
        import pandas as pd
        import sqlalchemy as sa

        engine = engine_for(self.connection_url)
        query, params = self._query(engine, task.payload)
        try:
            with engine.connect() as conn:
                frame = pd.read_sql(sa.text(query), conn, params=params, dtype_backend="pyarrow")
        except (sa.exc.SQLAlchemyError, pd.errors.DatabaseError) as exc:
            raise ReadError(f"query {task.name} at {_safe_url(self.connection_url)} failed: {exc}") from exc
        finally:
            engine.dispose()
        yield pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)

    def _query(self, engine: Any, bounds: tuple[Any, Any] | None) -> tuple[str, dict[str, Any]]:
        """The SQL text and parameters of one task: the query, or one range of it."""
        if bounds is None:
            return _escape(self.sql), {}
        lo, hi = bounds
        column = _quote(engine, self.partition_column or "")
        clauses, params = [], {}
        if lo is not None:
            clauses.append(f"{column} >= :lo")
            params["lo"] = lo
        if hi is not None:
            clauses.append(f"{column} < :hi")
            params["hi"] = hi
        where = " AND ".join(clauses) or "1 = 1"
        if lo is None:
            where = f"({where}) OR {column} IS NULL"
        return f"SELECT * FROM ({_escape(self.sql)}) AS q WHERE {where}", params

    def describe(self) -> str:
        return f"sql[{self.sql[:60]}]"


def _quote(engine: Any, identifier: str) -> str:
    return str(engine.dialect.identifier_preparer.quote(identifier))


def _escape(sql: str) -> str:
    r"""``sql`` with anything text() would take for a bind parameter escaped (``\:``)."""
    return _BIND.sub(r"\\:", sql)


def _ranges(lo: Any, hi: Any, n: int) -> list[tuple[Any, Any]]:
    """(start, stop) bounds: the first open below (and taking NULLs), the last open above."""
    if lo is None or hi is None or lo == hi or n <= 1:
        return [(None, None)]
    if isinstance(lo, int) and isinstance(hi, int):
        n = min(n, hi - lo + 1)
        step = -(-(hi - lo + 1) // n)
        edges = [lo + i * step for i in range(1, n) if lo + i * step <= hi]
    else:  # floats, decimals, dates and timestamps
        edges = sorted({lo + (hi - lo) * i / n for i in range(1, n)})
    bounds = [None, *edges, None]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


@dataclass
class SQLSink(Datasink):
    """Appends every block to ``table`` (created from the first block's columns by pandas).

    ``if_exists``: ``"append"`` to what is there, ``"replace"`` (drop it first)
    or ``"fail"`` (raise :class:`TableExistsError` before writing anything).
    """

    table: str
    connection_url: str
    if_exists: Literal["append", "replace", "fail"] = "append"
    name: str = "sql"

    def __post_init__(self) -> None:
        if self.if_exists not in IF_EXISTS:
            raise ConfigError(f"write_sql if_exists must be one of {list(IF_EXISTS)}, got {self.if_exists!r}")

    def prepare(self) -> None:
        import sqlalchemy as sa

        engine = engine_for(self.connection_url)
        try:
            exists = sa.inspect(engine).has_table(self.table)
            if exists and self.if_exists == "fail":
                raise TableExistsError(
                    f"table {self.table!r} already exists at {_safe_url(self.connection_url)}; "
                    "pass if_exists='append' to add rows or 'replace' to drop it first"
                )
            if exists and self.if_exists == "replace":
                sa.Table(self.table, sa.MetaData()).drop(engine)
        finally:
            engine.dispose()

    def write(self, block: pa.Table, task_index: int) -> WriteResult:
        import sqlalchemy as sa

        frame = block.to_pandas()
        engine = engine_for(self.connection_url)
        try:
            existed = sa.inspect(engine).has_table(self.table)
            try:
                self._append(engine, frame)
            except sa.exc.SQLAlchemyError:
                if existed or not sa.inspect(engine).has_table(self.table):
                    raise
                self._append(engine, frame)  # another block's task created the table first
        finally:
            engine.dispose()
        return WriteResult(None, block.num_rows, block.nbytes, extra={"table": self.table})

    def _append(self, engine: Any, frame: Any) -> None:
        with engine.begin() as conn:
            frame.to_sql(self.table, conn, if_exists="append", index=False)
