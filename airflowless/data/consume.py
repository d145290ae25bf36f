"""Running a Dataset's plan: the helpers its consumers share.

Every consumer goes through :func:`execute`: optimize the logical plan, lower
it, and stream it through the executor on the current cluster. Consumers that
only need a small answer per block (count, write, aggregate partials) append
a terminal transform so blocks never travel to the driver.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from .execution import handoff
from .execution.executor import Execution, stream
from .logical.operators import FromBlocks, Fused, Limit, LogicalOp, MapBlocks
from .optimizer import optimize
from .physical.lowering import lower
from .transforms import BlockTransform

__all__ = ["iter_blocks", "map_reduce", "materialized", "last_execution", "execution_of", "remember",
           "Terminal"]

_last: dict[str, Execution] = {}
_BAR_DELAY_S = 1.0


def last_execution() -> Execution | None:
    """The latest execution of any plan in this process."""
    return _last.get("execution")


_by_plan: dict[int, tuple[weakref.ref[LogicalOp], Execution]] = {}  # id(plan) -> its latest execution


def execution_of(plan: LogicalOp) -> Execution | None:
    """The latest execution of ``plan`` itself in this process, or None (a Dataset's ``stats()``)."""
    entry = _by_plan.get(id(plan))
    return entry[1] if entry is not None and entry[0]() is plan else None


def remember(plan: LogicalOp, ex: Execution) -> None:
    """Keep ``ex`` as ``plan``'s latest execution, for as long as ``plan`` lives."""
    key = id(plan)
    _by_plan[key] = (weakref.ref(plan, lambda _: _by_plan.pop(key, None)), ex)
    if isinstance(plan, Limit):  # take(), show(): the Dataset they were called on ran (its first rows)
        remember(plan.input, ex)


def _progress(total: int | None, desc: str) -> Any:
    from .context import DataContext

    enabled = DataContext.get_current().progress_bars
    if enabled is None:
        enabled = sys.stderr.isatty() or "ipykernel" in sys.modules
    if not enabled:
        return None
    from tqdm.auto import tqdm

    # shown only once the work has taken a second: a count or a show() leaves no bar behind in a notebook
    return tqdm(total=total, desc=desc, unit="block", leave=False, delay=_BAR_DELAY_S)


def _close(bar: Any, *, failed: bool) -> None:
    """Close ``bar``; a consumer that stopped early (``take``, ``show``) did not fail: its bar is not red."""
    if not failed:
        bar.total = bar.n
    bar.close()


@contextlib.contextmanager
def _execution(plan: LogicalOp) -> Iterator[Execution]:
    from ..runtime import cluster_client

    with cluster_client() as client:
        ex = Execution(client)
        _last["execution"] = ex
        remember(plan, ex)
        yield ex


def iter_blocks(plan: LogicalOp, *, desc: str = "Dataset") -> Iterator[pa.Table]:
    """The plan's blocks, fetched to this process in order (through shared memory where they can be,
    :mod:`.execution.handoff`)."""
    with _execution(plan) as ex:
        physical, box = handoff.fused(lower(optimize(plan)))
        bar = _progress(physical.planned_blocks(), desc)
        failed = False
        try:
            yield from stream(ex, physical, fetch=True, progress=bar, box=box)
        except GeneratorExit:  # the consumer stopped early
            raise
        except BaseException:
            failed = True
            raise
        finally:
            if bar is not None:
                _close(bar, failed=failed)


class Terminal(BlockTransform):
    """A last per-block function whose (small) result replaces the block."""

    def __init__(self, fn: Callable[[pa.Table], Any], name: str) -> None:
        self.fn = fn
        self._name = name

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name

    def __call__(self, table: pa.Table) -> Any:
        return self.fn(table)


def map_reduce(plan: LogicalOp, fn: Callable[[pa.Table], Any], name: str) -> list[Any]:
    """``fn`` of every block, computed where the block is made; the small results in order."""
    terminal = Terminal(fn, name)
    top = Fused(plan.input, (*plan.transforms, terminal), plan.concurrency, plan.resources) if (
        isinstance(plan, Fused) and plan.pool is None) else MapBlocks(plan, terminal)
    with _execution(plan) as ex:
        physical = lower(optimize(top))
        results = []
        for future in stream(ex, physical, fetch=False):
            results.append(future.result())
        return results


def materialized(plan: LogicalOp) -> FromBlocks:
    """Run ``plan`` now and keep its blocks on the cluster: the plan of those blocks (``Dataset.materialize``).

    Its :func:`execution_of` is the run that made it (so ``stats()`` of a materialized dataset are that run's).
    """
    with _execution(plan) as ex:
        blocks = list(stream(ex, lower(optimize(plan)), fetch=False))
        rows = [count for count, _ in ex.metas(blocks)]  # one round trip for them all, not one a block
    done = FromBlocks(tuple(blocks), tuple(rows), "Materialized")
    remember(done, ex)
    return done
