"""Ray Data quick start: read, map_batches, filter, groupby, iter_batches; counts equal to pandas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from airflowless import data  # Ray: import ray.data as data  (or: from ray import data)

pytestmark = pytest.mark.usefixtures("cluster_client")


def make_iris_like(folder: Path) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({
        "sepal_length": rng.uniform(4, 8, 600).round(2),
        "petal_width": rng.uniform(0, 2.5, 600).round(2),
        "species": rng.choice(["setosa", "versicolor", "virginica"], 600),
    })
    folder.mkdir()
    for i in range(3):  # three files, as a small directory of CSVs
        frame[i * 200:(i + 1) * 200].to_csv(folder / f"part-{i}.csv", index=False)
    return frame


def test_data_quickstart(tmp_path: Path) -> None:
    expected = make_iris_like(tmp_path / "iris")

    # ---- the program, as in Ray's docs ----
    ds = data.read_csv(str(tmp_path / "iris"))

    def add_ratio(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch["ratio"] = batch["petal_width"] / batch["sepal_length"]
        return batch

    ds = ds.map_batches(add_ratio).filter(lambda row: row["sepal_length"] > 5.0)
    counts = ds.groupby("species").count().to_pandas()
    means = ds.groupby("species").mean("ratio").to_pandas()
    rows = 0
    for batch in ds.iter_batches(batch_size=64, batch_format="pandas"):
        rows += len(batch)
    first = ds.take(3)
    # ----------------------------------------

    kept = expected[expected["sepal_length"] > 5.0].assign(ratio=lambda f: f["petal_width"] / f["sepal_length"])
    assert rows == len(kept) == ds.count()
    by_species: dict[str, Any] = kept.groupby("species").size().to_dict()
    assert dict(zip(counts["species"], counts["count()"], strict=True)) == by_species
    expected_means = kept.groupby("species")["ratio"].mean()
    for species, value in zip(means["species"], means["mean(ratio)"], strict=True):
        assert value == pytest.approx(expected_means[species])
    assert len(first) == 3 and set(first[0]) == {"sepal_length", "petal_width", "species", "ratio"}
