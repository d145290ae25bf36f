"""Random sampling of rows: each row kept with a probability, the same rows every time for one seed.

>>> import pyarrow as pa
>>> sample = RandomSampleFn(fraction=0.5, seed=7)
>>> table = pa.table({"id": list(range(10))})
>>> sample(table).equals(sample(table))
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa

from .transforms import BlockTransform

__all__ = ["RandomSampleFn"]


@dataclass(frozen=True, eq=False)
class RandomSampleFn(BlockTransform):
    """Keep each row with probability ``fraction``.

    A block's draws come from ``seed`` and the block's content (its row count,
    first and last row), so a block gives the same rows whenever it is
    computed again, and blocks of different rows draw differently.
    """

    fraction: float
    seed: int

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"RandomSample({self.fraction:g})"

    def __call__(self, table: pa.Table) -> pa.Table:
        import numpy as np

        if table.num_rows == 0:
            return table
        ends = repr((table.slice(0, 1).to_pylist(), table.slice(table.num_rows - 1, 1).to_pylist()))
        digest = hashlib.blake2b(f"{self.seed}|{table.num_rows}|{ends}".encode(), digest_size=8).digest()
        rng = np.random.default_rng([self.seed, int.from_bytes(digest, "little")])
        return table.filter(pa.array(rng.random(table.num_rows) < self.fraction, type=pa.bool_()))
