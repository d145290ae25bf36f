"""``@serve.batch`` on its own (no cluster): what a batch function may return."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pandas as pd
import pytest

from airflowless import serve


def _calls(fn: Any, items: list[Any]) -> list[Any]:
    async def all_of() -> list[Any]:
        return list(await asyncio.gather(*(fn(item) for item in items)))

    return asyncio.run(all_of())


def test_a_batch_may_return_a_numpy_array_or_a_series_of_its_length() -> None:
    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def doubled(xs: list[float]) -> np.ndarray:
        return np.asarray(xs) * 2

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def squared(xs: list[float]) -> pd.Series:
        return pd.Series(xs) ** 2

    assert _calls(doubled, [1.0, 2.0, 3.0]) == [2.0, 4.0, 6.0]
    assert _calls(squared, [1.0, 2.0, 3.0]) == [1.0, 4.0, 9.0]


def test_a_batch_returning_the_wrong_length_or_kind_is_a_clear_error() -> None:
    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def short(xs: list[int]) -> list[int]:
        return xs[:1]

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def frame(xs: list[int]) -> pd.DataFrame:
        return pd.DataFrame({"x": xs})

    with pytest.raises(TypeError, match="one result per input: 2 inputs, got 1 results"):
        _calls(short, [1, 2])
    with pytest.raises(TypeError, match="got DataFrame"):
        _calls(frame, [1, 2])
