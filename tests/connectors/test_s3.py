"""Object storage through fsspec (moto's S3 server), via the workers: parquet, CSV, JSON out and back; text, files in.

The Dask workers are other processes that never saw this test's environment,
so the credentials and the endpoint reach them only inside the tasks'
``storage_options``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from airflowless import data
from tests.conftest import require_module
from tests.support import s3
from tests.support.s3 import s3_client

s3_endpoint = s3.s3_endpoint  # the fixture

pytestmark = pytest.mark.usefixtures("cluster_client")

require_module("s3fs")
require_module("boto3")


@pytest.fixture
def bucket(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    name = f"b-{request.node.name.lower().replace('_', '-').replace('[', '-').strip(']')}"[:60]
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return name


def options(endpoint: str) -> dict[str, Any]:
    return {"key": "x", "secret": "x",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}


def keys(endpoint: str, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", []))


FORMATS = {"parquet": (data.read_parquet, "write_parquet", "parquet"),
           "csv": (data.read_csv, "write_csv", "csv"),
           "json": (data.read_json, "write_json", "jsonl")}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_write_to_s3_then_read_back(fmt: str, s3_endpoint: str, bucket: str) -> None:
    reader, writer, suffix = FORMATS[fmt]
    df = pd.DataFrame({"id": range(40), "x": [i * 0.5 for i in range(40)], "s": [f"v{i}" for i in range(40)]})
    url = f"s3://{bucket}/prefix/{fmt}"

    written = getattr(data.from_pandas([df.iloc[:20], df.iloc[20:]]), writer)(url, **options(s3_endpoint))

    assert keys(s3_endpoint, bucket) == [f"prefix/{fmt}/part-0000{i}.{suffix}" for i in range(2)]
    assert len(written) == 2
    back = reader(url, storage_options=options(s3_endpoint)).to_pandas()
    pd.testing.assert_frame_equal(back.sort_values("id").reset_index(drop=True), df)


def test_s3_read_with_projection_and_filter(s3_endpoint: str, bucket: str) -> None:
    df = pd.DataFrame({"id": range(10), "x": [float(i) for i in range(10)]})
    data.from_pandas(df).write_parquet(f"s3://{bucket}/p", **options(s3_endpoint))

    ds = data.read_parquet(f"s3://{bucket}/p", columns=["id"], filter=data.col("x") >= 7,
                           storage_options=options(s3_endpoint))

    assert sorted(r["id"] for r in ds.take_all()) == [7, 8, 9]


def test_s3_text_lines_and_binary_files(s3_endpoint: str, bucket: str) -> None:
    client = s3_client(s3_endpoint)
    client.put_object(Bucket=bucket, Key="logs/a.log", Body=b"one\ntwo\n")
    client.put_object(Bucket=bucket, Key="logs/b.log", Body=b"three\n")
    client.put_object(Bucket=bucket, Key="logs/c.bin", Body=b"\x00\xff")

    lines = data.read_text(f"s3://{bucket}/logs", file_extensions=["log"], storage_options=options(s3_endpoint))
    assert [row["text"] for row in lines.take_all()] == ["one", "two", "three"]
    files = data.read_binary_files(f"s3://{bucket}/logs", include_paths=True, storage_options=options(s3_endpoint))
    assert {row["path"]: row["bytes"] for row in files.take_all()} == {
        f"{bucket}/logs/a.log": b"one\ntwo\n", f"{bucket}/logs/b.log": b"three\n", f"{bucket}/logs/c.bin": b"\x00\xff"}
