"""Files of one read with different columns are refused, naming the file, by every file reader (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from airflowless import data
from connectors.parquet import ReadError

pytestmark = pytest.mark.usefixtures("cluster_client")

FIRST = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
OTHER = pd.DataFrame({"a": [3], "c": ["x"]})


def write(folder: Path, kind: str, frames: list[pd.DataFrame]) -> str:
    folder.mkdir()
    for i, frame in enumerate(frames):
        path = folder / f"part-{i}.{ {'csv': 'csv', 'json': 'jsonl', 'parquet': 'parquet'}[kind]}"
        if kind == "csv":
            frame.to_csv(path, index=False)
        elif kind == "json":
            frame.to_json(path, orient="records", lines=True)
        else:
            frame.to_parquet(path)
    return str(folder)


def read(kind: str, path: str, **kw: object) -> data.Dataset:
    return {"csv": data.read_csv, "json": data.read_json, "parquet": data.read_parquet}[kind](path, **kw)


@pytest.mark.parametrize("kind", ["csv", "json", "parquet"])
def test_files_with_different_columns_are_refused_by_every_consumer(kind: str, tmp_path: Path) -> None:
    ds = read(kind, write(tmp_path / kind, kind, [FIRST, OTHER]))
    for consume in (ds.count, ds.to_pandas):
        with pytest.raises(ReadError, match=r"part-1.*the first file.*missing columns \['b'\], extra columns \['c'\]"):
            consume()


@pytest.mark.parametrize("kind", ["csv", "json", "parquet"])
def test_columns_every_file_has_can_be_read(kind: str, tmp_path: Path) -> None:
    ds = read(kind, write(tmp_path / kind, kind, [FIRST, OTHER]), columns=["a"])
    assert sorted(ds.to_pandas()["a"].tolist()) == [1, 2, 3]
    assert ds.count() == 3


@pytest.mark.parametrize("kind", ["csv", "json", "parquet"])
def test_the_same_columns_in_another_order_read_in_the_first_files_order(kind: str, tmp_path: Path) -> None:
    ds = read(kind, write(tmp_path / kind, kind, [FIRST, FIRST[["b", "a"]]]))
    out = ds.to_pandas()
    assert out.columns.tolist() == ["a", "b"] and out["a"].tolist() == [1, 2, 1, 2]


def test_csv_types_inferred_per_file_are_unified(tmp_path: Path) -> None:
    ds = data.read_csv(write(tmp_path / "csv", "csv", [FIRST, pd.DataFrame({"a": [1.5], "b": [None]})]))
    out = ds.to_pandas()
    assert out["a"].tolist() == [1.0, 2.0, 1.5] and out["b"].isna().tolist() == [False, False, True]


def test_csv_types_that_cannot_be_unified_name_the_column(tmp_path: Path) -> None:
    from airflowless.data.block import SchemaMismatchError

    ds = data.read_csv(write(tmp_path / "csv", "csv", [FIRST, pd.DataFrame({"a": ["text"], "b": [1.0]})]))
    with pytest.raises(SchemaMismatchError, match="Field a has incompatible types"):
        ds.to_pandas()
