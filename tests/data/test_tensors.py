"""Tensor columns (Arrow fixed-size lists) arrive as real n-d arrays and tensors (issue 13, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from airflowless import data, train
from airflowless.data.preprocessors import Concatenator

pytestmark = pytest.mark.usefixtures("cluster_client")


def features(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "y": (rng.random(n) > 0.5) * 1.0})


def concatenated(n: int = 40) -> data.Dataset:
    df = features(n)
    half = n // 2
    return Concatenator(columns=["a", "b"], output_column_name="x", dtype="float32").transform(
        data.from_pandas([df[:half], df[half:].reset_index(drop=True)]))


def test_from_numpy_of_a_matrix_gives_it_back_with_its_shape() -> None:
    matrix = np.arange(12).reshape(6, 2)
    batch = data.from_numpy(matrix).take_batch()
    assert batch["data"].shape == (6, 2) and batch["data"].dtype == np.int64
    np.testing.assert_array_equal(batch["data"], matrix)
    cube = np.arange(24.0).reshape(3, 4, 2)
    np.testing.assert_array_equal(data.from_numpy({"t": cube}).take_batch()["t"], cube)


def test_map_batches_sees_a_concatenated_column_as_a_matrix() -> None:
    sums = concatenated().map_batches(lambda b: {"s": b["x"].sum(axis=1)}, batch_size=7).to_pandas()["s"]
    df = features()
    np.testing.assert_allclose(sums.to_numpy(), (df.a + df.b).to_numpy(dtype=np.float32), rtol=1e-6)


def test_batches_across_block_boundaries_keep_the_shape() -> None:
    shapes = [b["x"].shape for b in concatenated().iter_batches(batch_size=15)]
    assert shapes == [(15, 2), (15, 2), (10, 2)]


def test_iter_torch_batches_gives_two_dimensional_tensors() -> None:
    import torch

    batch = next(concatenated().iter_torch_batches(batch_size=8))
    assert isinstance(batch["x"], torch.Tensor)
    assert batch["x"].shape == (8, 2) and batch["x"].dtype == torch.float32


def test_a_pandas_function_returning_arrays_per_row_makes_a_tensor_column() -> None:
    def pairs(df: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"v": [np.array([i, i * 2]) for i in df["id"]]})

    ds = data.range(10, parallelism=3).map_batches(pairs, batch_format="pandas")
    assert ds.schema().field("v").type == pa.list_(pa.int64(), 2)
    np.testing.assert_array_equal(ds.take_batch(10)["v"], np.stack([np.arange(10), 2 * np.arange(10)], axis=1))


def test_tensor_columns_survive_a_parquet_round_trip(tmp_path: Path) -> None:
    cube = np.arange(48.0).reshape(6, 4, 2)
    data.from_numpy({"t": cube, "i": np.arange(6)}).repartition(2).write_parquet(str(tmp_path))
    back = data.read_parquet(str(tmp_path)).take_batch(6)
    assert back["t"].shape == (6, 4, 2)
    np.testing.assert_array_equal(back["t"], cube)


def _loop(config: dict[str, Any]) -> None:
    import torch

    shard = train.get_dataset_shard("train")
    shapes, total = set(), 0.0
    for batch in shard.iter_torch_batches(batch_size=8):
        x = batch["x"]
        shapes.add(tuple(x.shape[1:]))
        total += float(torch.nn.functional.linear(x, torch.ones(1, 2)).sum())
    train.report({"feature_shapes": sorted(shapes), "total": total})


def test_a_torch_trainer_feeds_a_concatenated_column_to_its_loop() -> None:
    from airflowless.train import ScalingConfig
    from airflowless.train.torch import TorchConfig, TorchTrainer

    df = features()
    trainer = TorchTrainer(_loop, scaling_config=ScalingConfig(num_workers=1), torch_config=TorchConfig(timeout_s=60),
                           datasets={"train": data.from_pandas(df)},
                           preprocessor=Concatenator(columns=["a", "b"], output_column_name="x", dtype="float32"))
    result = trainer.fit()
    assert result.error is None
    assert [tuple(s) for s in result.metrics["feature_shapes"]] == [(2,)]
    assert result.metrics["total"] == pytest.approx(float((df.a + df.b).sum()), rel=1e-5)
