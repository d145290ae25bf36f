"""numpy_batches (the numpy path of iter_batches) gives exactly what a conversion per rebatched table gives:
values, types, shapes and whether each array may be written to."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflowless.data.block import numpy_batches, rebatch, to_batch


@st.composite
def _blocks(draw: st.DrawFn) -> list[pa.Table]:
    tables = []
    for rows in draw(st.lists(st.integers(0, 30), max_size=5)):
        ints = draw(st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=rows, max_size=rows))
        tables.append(pa.table({
            "i": pa.array(ints, pa.int64()),  # nulls in some blocks: a float batch where one is, else int
            "f": pa.array(np.arange(rows) * 0.5),
            "s": pa.array([f"r{n}" for n in range(rows)]),
            "b": pa.array([n % 3 == 0 for n in range(rows)]),
            "t": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(2 * rows, dtype=np.float32)), 2),
        }))
        if rows > 1 and draw(st.booleans()):  # a block in two chunks, as a concatenation makes
            tables[-1] = pa.concat_tables([tables[-1].slice(0, rows // 2), tables[-1].slice(rows // 2)])
    return tables


@settings(max_examples=300, deadline=None)
@given(_blocks(), st.integers(1, 17), st.booleans())
def test_numpy_batches_equal_a_conversion_per_batch(tables: list[pa.Table], batch_size: int,
                                                    drop_last: bool) -> None:
    expected = [to_batch(t, "numpy") for t in rebatch(iter(tables), batch_size, drop_last=drop_last)]
    got = list(numpy_batches(iter(tables), batch_size, drop_last=drop_last))
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
            assert a[name].flags.writeable == b[name].flags.writeable, name
            if a[name].dtype == object:
                assert list(a[name]) == list(b[name]), name
            else:
                assert np.array_equal(a[name], b[name], equal_nan=a[name].dtype.kind == "f"), name
