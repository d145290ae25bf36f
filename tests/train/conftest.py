"""Fixtures the train tests share."""

from __future__ import annotations

import pandas as pd
import pytest

from airflowless.datasets import LABEL_COLUMN, add_features, taxi_table


def gbdt_frame(rows: int, seed: int) -> pd.DataFrame:
    """Taxi rows with the features, an integer label and no timestamps (what the GBDT trainers take);
    tip_amount goes too (the label is computed from it)."""
    frame = add_features(taxi_table(rows, seed=seed)).to_pandas()
    frame = frame.drop(columns=["pickup_ts", "dropoff_ts", "tip_amount"])
    frame[LABEL_COLUMN] = frame[LABEL_COLUMN].astype("int64")
    return frame


@pytest.fixture(scope="module")
def taxi() -> pd.DataFrame:
    """6,000 trips (test files that need more define their own ``taxi``)."""
    return gbdt_frame(6_000, seed=1)
