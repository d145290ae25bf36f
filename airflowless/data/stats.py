"""What ``Dataset.stats()`` returns: the last execution's per-operator table, as text and as a chart.

>>> stats = DatasetStats.of([OperatorStats("ReadParquet", tasks=4, blocks=4, rows=1000, bytes=8000,
...                                        seconds=0.5)], peak_held_bytes=0, budget=1_000_000)
>>> print(stats.splitlines()[1].split())
['ReadParquet', '4', '4', '1000', '0.0', '0.50']
>>> stats.operators[0].rows
1000
>>> fig = stats.plot()                                          # a Bokeh layout: time and rows per operator

It is a ``str`` (Ray's ``Dataset.stats()`` returns text, and printing it
shows the table) that also keeps the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DatasetStats", "OperatorStats"]


@dataclass(frozen=True)
class OperatorStats:
    """One operator of the last execution: tasks, output blocks, rows, bytes and wall time (None: unknown)."""

    name: str
    tasks: int
    blocks: int
    rows: int | None
    bytes: int | None
    seconds: float | None


class DatasetStats(str):
    """The table ``print(ds.stats())`` shows; ``.operators`` holds its rows and ``.plot()`` draws them."""

    operators: tuple[OperatorStats, ...] = ()

    @classmethod
    def of(cls, operators: Sequence[OperatorStats], *, peak_held_bytes: int, budget: int) -> DatasetStats:
        lines = [f"{'operator':<60} {'tasks':>6} {'blocks':>7} {'rows':>10} {'MB':>9} {'time s':>8}"]
        for op in operators:
            rows = "-" if op.rows is None else str(op.rows)
            mb = "-" if op.bytes is None else f"{op.bytes / 1e6:.1f}"
            wall = "-" if op.seconds is None else f"{op.seconds:.2f}"
            blocks = str(op.blocks) if op.blocks else "-"
            lines.append(f"{op.name[:60]:<60} {op.tasks:>6} {blocks:>7} {rows:>10} {mb:>9} {wall:>8}")
        lines.append(f"peak block bytes held by the consumer: {peak_held_bytes / 1e6:.1f} MB "
                     f"(budget {budget / 1e6:.0f} MB)")
        stats = cls("\n".join(lines))
        stats.operators = tuple(operators)
        return stats

    @classmethod
    def empty(cls) -> DatasetStats:
        return cls("nothing has run yet")

    def plot(self) -> Any:
        """A Bokeh layout: each operator's wall time and rows out, in the table's order.

        >>> from bokeh.io import output_notebook, show             # doctest: +SKIP
        >>> output_notebook(); show(ds.stats().plot())              # doctest: +SKIP
        """
        from ..plots import operator_chart

        return operator_chart([(op.name, op.seconds, op.rows) for op in self.operators], title="last execution")
