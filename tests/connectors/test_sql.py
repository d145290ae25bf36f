"""SQL connector: write_sql / read_sql through a real cluster, on PostgreSQL and an SQLite file."""

from __future__ import annotations

import datetime
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from airflowless import data
from connectors.parquet import ReadError
from connectors.sql import SQLSink, SQLSource, TableExistsError, _ranges, engine_for

pytestmark = pytest.mark.usefixtures("cluster_client")


def frame(n: int = 50) -> pd.DataFrame:
    return pd.DataFrame({"id": range(n), "x": [i / 8 for i in range(n)], "name": [f"row {i}" for i in range(n)],
                         "grp": [None if i % 7 == 0 else i % 5 for i in range(n)]})


def write(df: pd.DataFrame, table: str, url: str, *, if_exists: str = "append") -> None:
    data.from_pandas([df.iloc[: len(df) // 2], df.iloc[len(df) // 2:]]).write_sql(table, url, if_exists=if_exists)


def ids(ds: data.Dataset) -> list[int]:
    return sorted(r["id"] for r in ds.take_all())


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_write_then_read_in_one_task(url: str) -> None:
    df = frame()
    write(df, "points", url)

    ds = data.read_sql("SELECT id, x, name FROM points", url)

    assert len(SQLSource("SELECT id FROM points", url).plan()) == 1
    back = ds.to_pandas().sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(back, df[["id", "x", "name"]], check_dtype=False)


@pytest.mark.parametrize("column", ["id", "x", "grp"])
def test_partitioned_read_returns_every_row_once(url: str, column: str) -> None:
    write(frame(), "points", url)

    ds = data.read_sql("SELECT * FROM points", url, parallelism=3, partition_column=column)

    assert len(SQLSource("SELECT * FROM points", url, parallelism=3, partition_column=column).plan()) == 3
    assert ids(ds) == list(range(50))  # grp has NULLs: they go to the first range
    assert len(list(ds.iter_internal_blocks())) == 3


def test_if_exists_fail_replace_append(url: str) -> None:
    write(frame(10), "points", url)

    with pytest.raises(TableExistsError, match="'points' already exists"):
        write(frame(10), "points", url, if_exists="fail")
    write(frame(4), "points", url, if_exists="replace")
    assert ids(data.read_sql("SELECT id FROM points", url)) == [0, 1, 2, 3]
    write(frame(2), "points", url, if_exists="append")
    assert ids(data.read_sql("SELECT id FROM points", url)) == [0, 0, 1, 1, 2, 3]
    with pytest.raises(ValueError, match="if_exists must be one of"):
        write(frame(2), "points", url, if_exists="truncate")


def test_values_in_the_query_are_not_taken_for_parameters(postgres_url: str) -> None:
    write(frame(10), "points", postgres_url)

    ds = data.read_sql("SELECT id, ' :odd 100%' AS note, x::text AS t FROM points WHERE name LIKE 'row 1%'",
                       postgres_url, parallelism=2, partition_column="id")

    assert ds.take_all() == [{"id": 1, "note": " :odd 100%", "t": "0.125"}]


def test_bad_sql_and_bad_parameters_are_clear(postgres_url: str) -> None:
    with pytest.raises(ValueError, match="needs partition_column"):
        data.read_sql("SELECT 1", postgres_url, parallelism=4)
    with pytest.raises(ReadError, match="partition column 'nope'"):
        data.read_sql("SELECT 1 AS id", postgres_url, parallelism=2, partition_column="nope").take_all()
    with pytest.raises(ReadError, match="'name' holds str values.*use a numeric, date or timestamp"):
        data.read_sql("SELECT 'a' AS name UNION SELECT 'b'", postgres_url, parallelism=2,
                      partition_column="name").take_all()
    with pytest.raises(ReadError, match="no_such_table"):
        data.read_sql("SELECT * FROM no_such_table", postgres_url).take_all()


def test_an_empty_result_is_one_task(postgres_url: str) -> None:
    write(frame(3), "points", postgres_url)

    source = SQLSource("SELECT * FROM points WHERE id < 0", postgres_url, parallelism=3, partition_column="id")

    assert [t.payload for t in source.plan()] == [(None, None)]
    assert data.read_sql("SELECT * FROM points WHERE id < 0", postgres_url).count() == 0


def test_ranges_cover_the_span_without_overlap() -> None:
    assert _ranges(0, 9, 3) == [(None, 4), (4, 8), (8, None)]
    assert _ranges(0, 1, 5) == [(None, 1), (1, None)]
    assert _ranges(5, 5, 3) == [(None, None)]
    assert _ranges(0.0, 3.0, 3) == [(None, 1.0), (1.0, 2.0), (2.0, None)]
    jan = [datetime.date(2024, 1, d) for d in (1, 11, 21, 31)]
    assert _ranges(jan[0], jan[3], 3) == [(None, jan[1]), (jan[1], jan[2]), (jan[2], None)]


def test_postgres_urls_use_psycopg_and_sinks_quote_table_names(postgres_url: str) -> None:
    assert engine_for(postgres_url).url.drivername == "postgresql+psycopg"
    table = 'odd "name"; DROP TABLE x'
    SQLSink(table, postgres_url).prepare()
    write(frame(3), table, postgres_url)

    assert sa.inspect(engine_for(postgres_url)).has_table(table)
    write(frame(3), table, postgres_url, if_exists="replace")
    assert data.read_sql('SELECT count(*) AS n FROM "odd ""name""; DROP TABLE x"', postgres_url).take_all() == [
        {"n": 3}]


def test_blocks_racing_to_create_the_table_all_land(url: str) -> None:
    import threading

    import pyarrow as pa

    for round_ in range(4):
        sink = SQLSink(f"race_{round_}", url)
        sink.prepare()
        errors: list[BaseException] = []

        def write_one(k: int, sink: SQLSink = sink, errors: list[BaseException] = errors) -> None:
            try:
                sink.write(pa.table({"id": [k, k + 10]}), k)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write_one, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        assert errors == []
        assert ids(data.read_sql(f"SELECT id FROM race_{round_}", url)) == [0, 1, 2, 10, 11, 12]
