"""File connectors (parquet, CSV, JSON lines) round-tripped through a real cluster."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflowless import data
from airflowless.data.optimizer import optimize
from connectors.parquet import ReadError
from connectors.paths import SourceNotFoundError

pytestmark = pytest.mark.usefixtures("cluster_client")

FORMATS: dict[str, tuple[Callable[..., data.Dataset], str, str]] = {
    # format: (reader, writer method name, file suffix)
    "parquet": (data.read_parquet, "write_parquet", ".parquet"),
    "csv": (data.read_csv, "write_csv", ".csv"),
    "json": (data.read_json, "write_json", ".jsonl"),
}


def frame(n: int = 30, start: int = 0) -> pd.DataFrame:
    ids = list(range(start, start + n))
    return pd.DataFrame({"id": ids, "x": [i / 4 for i in ids], "name": [f"n{i}" for i in ids],
                         "flag": [i % 2 == 0 for i in ids]})


def sorted_frame(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id").reset_index(drop=True)[sorted(df.columns)]


def write(fmt: str, df: pd.DataFrame, path: Path, blocks: int = 3) -> list[str]:
    size = -(-len(df) // blocks)
    parts = [df.iloc[i:i + size] for i in range(0, len(df), size)]
    return getattr(data.from_pandas(parts), FORMATS[fmt][1])(str(path))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_write_then_read_gives_the_same_rows(fmt: str, tmp_path: Path) -> None:
    df = frame()
    written = write(fmt, df, tmp_path / "out")

    assert [Path(p).name for p in written] == [f"part-{i:05d}{FORMATS[fmt][2]}" for i in range(3)]
    back = FORMATS[fmt][0](str(tmp_path / "out")).to_pandas()
    pd.testing.assert_frame_equal(sorted_frame(back), sorted_frame(df))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_columns_are_pushed_into_the_reader(fmt: str, tmp_path: Path) -> None:
    write(fmt, frame(), tmp_path / "out")

    ds = FORMATS[fmt][0](str(tmp_path / "out"), columns=["name", "id"])

    assert "columns=['name', 'id']" in optimize(ds.plan).label
    back = ds.to_pandas()
    assert list(back.columns) == ["name", "id"]
    assert sorted(back["id"]) == list(range(30))


def test_csv_reads_globs_lists_nested_folders_and_gzip(tmp_path: Path) -> None:
    (tmp_path / "a" / "deep").mkdir(parents=True)
    frame(5, 0).to_csv(tmp_path / "a" / "one.csv", index=False)
    frame(5, 5).to_csv(tmp_path / "a" / "deep" / "two.csv.gz", index=False, compression="gzip")
    frame(5, 10).to_csv(tmp_path / "a" / "three.csv", index=False)
    (tmp_path / "a" / "notes.txt").write_text("not data")
    (tmp_path / "a" / "_SUCCESS").write_text("")
    (tmp_path / "a" / "_tmp.csv").write_text("")  # skipped in folders

    assert sorted(data.read_csv(str(tmp_path / "a")).to_pandas()["id"]) == list(range(15))
    assert sorted(data.read_csv(str(tmp_path / "a" / "[ot]*.csv")).to_pandas()["id"]) == [*range(5), *range(10, 15)]
    listed = data.read_csv([str(tmp_path / "a" / "one.csv"), str(tmp_path / "a" / "deep")]).to_pandas()
    assert sorted(listed["id"]) == list(range(10))


def test_json_reads_gzip_and_empty_files(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "rows.jsonl.gz", "wt") as f:
        f.write('{"id": 1, "tags": ["a"]}\n{"id": 2, "tags": []}\n')
    (tmp_path / "empty.json").write_text("")

    rows = sorted(data.read_json(str(tmp_path)).take_all(), key=lambda r: r["id"])

    assert rows == [{"id": 1, "tags": ["a"]}, {"id": 2, "tags": []}]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_missing_path_is_named(fmt: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    with pytest.raises(SourceNotFoundError, match="nowhere.*does not exist"):
        FORMATS[fmt][0](missing)
    with pytest.raises(SourceNotFoundError, match=r"matched no file ending in \.csv"):
        data.read_csv(str(tmp_path))  # an empty folder


CORRUPT: dict[str, tuple[str, bytes]] = {
    "parquet": ("part-99999.parquet", b"PAR1 this is not parquet \x00\xff"),
    "csv": ("part-99999.csv", b"id,x,name,flag\n1,2.0\n3,4.0,n,true,extra\n"),
    "csv.gz": ("part-99999.csv.gz", b"\x00\xff not gzip at all"),
    "json": ("part-99999.jsonl", b'{"id": 1}\n{"id": \n'),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_a_corrupt_file_is_named_when_consumed(case: str, tmp_path: Path) -> None:
    fmt = case.split(".")[0]
    write(fmt, frame(), tmp_path / "out")
    name, garbage = CORRUPT[case]
    (tmp_path / "out" / name).write_bytes(garbage)

    ds = FORMATS[fmt][0](str(tmp_path / "out"))
    with pytest.raises(ReadError, match=name.replace(".", r"\.")):
        ds.to_pandas()


def test_a_parquet_file_with_another_schema_is_named(tmp_path: Path) -> None:
    write("parquet", frame(), tmp_path / "out")
    pq.write_table(pa.table({"id": ["not", "ints"], "x": [1.0, 2.0]}), tmp_path / "out" / "part-99999.parquet")

    with pytest.raises(ReadError, match=r"part-99999\.parquet.*missing columns \['name', 'flag'\].*id: int64 -> string"):
        data.read_parquet(str(tmp_path / "out")).to_pandas()


def test_csv_passes_arrow_options_and_rejects_unknown_ones(tmp_path: Path) -> None:
    import pyarrow.csv as pacsv

    (tmp_path / "semi.csv").write_text("id;label\n1;a\n2;b\n")

    ds = data.read_csv(str(tmp_path / "semi.csv"), parse_options=pacsv.ParseOptions(delimiter=";"),
                       convert_options=pacsv.ConvertOptions(column_types={"id": pa.float64()}),
                       columns=["id"])

    assert ds.take_all() == [{"id": 1.0}, {"id": 2.0}]
    with pytest.raises(TypeError, match="delimiter"):
        data.read_csv(str(tmp_path / "semi.csv"), delimiter=";")


def test_a_projected_column_that_is_not_there_is_named(tmp_path: Path) -> None:
    write("csv", frame(), tmp_path / "out", blocks=1)
    kwargs: dict[str, Any] = {"columns": ["id", "nope"]}

    with pytest.raises(ReadError, match=r"part-00000\.csv.*'nope'"):
        data.read_csv(str(tmp_path / "out"), **kwargs).to_pandas()
