"""Prepared data shared across fits: trials of one experiment prepare their data once.

Two levels, both held under a memory budget and evicted oldest first:

- **On the driver** (:class:`PreparedCache`, one per process): for a
  (datasets, preprocessor) pair, the fitted preprocessor and the transformed,
  materialized datasets, whose blocks stay on the workers. The key is the
  datasets' plan tokens (a hash of the plan: an unseeded shuffle draws its seed
  when the plan is built, so one Dataset object has one token) and the
  preprocessor's state before the fit. Trials of one experiment (a *scope*)
  share an entry; the entry is dropped when the experiment ends. Outside an
  experiment, fits share an entry only when their plans read no files (blocks
  already on the cluster), since a file may change between two fits.
- **On each worker** (:class:`WorkerMatrices`, in the airflowless worker
  plugin's state): what a GBDT rank built from its shards (XGBoost's
  QuantileDMatrix and evaluation DMatrix), keyed by the rank layout (every
  rank's block keys), the rank, the label and the binning parameters. Block
  keys are new for every materialization, so a matrix never outlives the data
  it was built from; it is dropped with the driver entry it came from.

A lost worker loses its matrices and, for a moment, blocks: the ranks agree
(one all-reduce) to rebuild unless every rank still holds its matrices, and a
driver entry whose blocks failed is prepared again.

>>> from airflowless.train import prepared
>>> prepared.stats()                                   # doctest: +SKIP
{'entries': 1, 'bytes': 112000000, 'budget_bytes': 6000000000, 'hits': 8, 'misses': 1, 'evictions': 0, ...}
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PreparedCache", "WorkerMatrices", "prepared_cache", "stats", "usage_since", "release_scope",
           "plan_token", "layout_token", "worker_matrices", "WORKER_STATE_KEY"]

WORKER_STATE_KEY = "airflowless.train.prepared"
WORKER_BUDGET_FRACTION = 0.1  # of a worker's memory limit, for the matrices it keeps


def plan_token(plan: Any) -> str:
    """A hash of a logical plan (its operators, functions and block keys)."""
    import cloudpickle

    return hashlib.sha256(cloudpickle.dumps(plan)).hexdigest()


def _reads_files(plan: Any) -> bool:
    """Whether the plan reads something that may change between two fits (files, a database): any
    read but of tables in the plan itself (``from_pandas``, ``from_arrow``, ``from_items``) or ``range``."""
    from connectors.memory import RangeSource, SubsetSource, TablesSource

    from ..data.logical.operators import Read, walk

    def fixed(source: Any) -> bool:
        if isinstance(source, SubsetSource):
            return fixed(source.source)
        return isinstance(source, (TablesSource, RangeSource))

    return any(isinstance(op, Read) and not fixed(op.source) for op in walk(plan))


def layout_token(assigned: list[dict[str, tuple[list[Any], int]]]) -> str:
    """A hash of which blocks every rank trains on (the rank layout)."""
    digest = hashlib.sha256()
    for rank, shards in enumerate(assigned):
        for name in sorted(shards):
            blocks, rows = shards[name]
            digest.update(f"{rank}|{name}|{rows}|{','.join(str(b.key) for b in blocks)};".encode())
    return digest.hexdigest()[:32]


@dataclass
class Entry:
    key: str
    preprocessor: Any
    plans: dict[str, Any]
    nbytes: int
    client_id: str
    scopes: set[str | None] = field(default_factory=set)
    created: float = field(default_factory=time.time)
    layouts: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)  # (workers, equal) -> shards


class PreparedCache:
    """The driver's prepared datasets, by (datasets, preprocessor); see the module docstring."""

    def __init__(self, budget_bytes: int | None = None) -> None:
        self.budget_bytes = budget_bytes  # None: DataContext's memory budget of the cluster
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._building: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.counts = {"hits": 0, "misses": 0, "evictions": 0, "rebuilds": 0}

    # -- lookup ------------------------------------------------------------------------
    def prepare(self, client: Any, datasets: dict[str, Any], preprocessor: Any, scope: str | None,
                build: Callable[[], tuple[Any, dict[str, Any]]]) -> tuple[Any, dict[str, Any], str | None]:
        """(fitted preprocessor, materialized plans, entry key) for ``datasets`` and ``preprocessor``.

        ``build()`` prepares them when no usable entry is held. Fits that may not
        share (files read outside an experiment) build and keep nothing (key None).
        """
        plans = {n: ds.plan for n, ds in datasets.items()}
        if scope is None and any(_reads_files(p) for p in plans.values()):
            fitted, built = build()
            return fitted, built, None
        key = self._key(plans, preprocessor)
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:  # trials starting together: one prepares, the others wait for it
            entry = self._usable(client, key)
            if entry is not None:
                with self._lock:
                    entry.scopes.add(scope)
                    self._entries.move_to_end(key)
                    self.counts["hits"] += 1
                return copy.deepcopy(entry.preprocessor), dict(entry.plans), key
            fitted, built = build()
            entry = Entry(key, copy.deepcopy(fitted), dict(built), _plan_bytes(client, built), str(client.id),
                          {scope})
            with self._lock:
                self.counts["misses"] += 1
                self._entries[key] = entry
                self._evict(client)
            return fitted, built, key

    def _key(self, plans: dict[str, Any], preprocessor: Any) -> str:
        import cloudpickle

        digest = hashlib.sha256()
        for name in sorted(plans):
            digest.update(f"{name}={plan_token(plans[name])};".encode())
        digest.update(b"preprocessor=" + hashlib.sha256(cloudpickle.dumps(_unfitted(preprocessor))).digest())
        return digest.hexdigest()[:32]

    def _usable(self, client: Any, key: str) -> Entry | None:
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return None
        alive = entry.client_id == str(client.id) and all(
            block.status == "finished" for plan in entry.plans.values() for block in plan.blocks)
        if not alive:  # a block was lost for good (or the client changed): prepare again
            self._drop(client, [key])
            with self._lock:
                self.counts["rebuilds"] += 1
            return None
        return entry

    def shards(self, key: str | None, layout: tuple[Any, ...], assign: Callable[[], list[Any]]) -> list[Any]:
        """The ranks' shards of entry ``key`` for ``layout`` (the ranks' workers, how it is cut): those of
        an earlier fit with that layout (slices cut from blocks keep their keys), else ``assign()``'s."""
        with self._lock:
            entry = self._entries.get(key) if key is not None else None
            found = entry.layouts.get(layout) if entry is not None else None
        if found is not None and all(block.status == "finished" for shards in found
                                     for blocks, _ in shards.values() for block in blocks):
            return [dict(shards) for shards in found]
        assigned = assign()
        if entry is not None:
            with self._lock:
                entry.layouts[layout] = [dict(shards) for shards in assigned]
        return assigned

    # -- forgetting --------------------------------------------------------------------
    def _budget(self, client: Any) -> int:
        if self.budget_bytes is not None:
            return self.budget_bytes
        from ..data.context import DataContext

        ctx = DataContext.get_current()
        if ctx.memory_budget_bytes:
            return int(ctx.memory_budget_bytes)
        info = client.scheduler_info(n_workers=-1).get("workers", {})
        memory = sum(w.get("memory_limit", 0) or 0 for w in info.values())
        return int(ctx.memory_budget_fraction * (memory or 4 << 30))

    def _evict(self, client: Any) -> None:
        """Drop the oldest entries while over budget (the newest always stays). Holds ``_lock``."""
        budget = self._budget(client)
        dropped = []
        while len(self._entries) > 1 and sum(e.nbytes for e in self._entries.values()) > budget:
            key, _ = self._entries.popitem(last=False)
            dropped.append(key)
            self.counts["evictions"] += 1
        if dropped:
            _drop_worker_matrices(client, dropped)

    def _drop(self, client: Any, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)
        if client is None and keys:
            with contextlib.suppress(ValueError):  # no client: no cluster holds them any more
                from distributed import get_client

                client = get_client()
        if client is not None and keys:
            _drop_worker_matrices(client, keys)

    def release_scope(self, scope: str, client: Any = None) -> None:
        """Drop the entries an experiment used (it ended)."""
        with self._lock:
            keys = [k for k, e in self._entries.items() if scope in e.scopes]
        self._drop(client, keys)

    def clear(self, client: Any = None) -> None:
        with self._lock:
            keys = list(self._entries)
        self._drop(client, keys)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"entries": len(self._entries), "bytes": sum(e.nbytes for e in self._entries.values()),
                    "budget_bytes": self.budget_bytes, **self.counts}


def _unfitted(preprocessor: Any) -> Any:
    """What a fit's outcome depends on: a fittable preprocessor's parameters, not what it learned before
    (attributes ending in ``_``), since it is fitted again; anything else as it is."""
    if preprocessor is None or not getattr(preprocessor, "is_fittable", False) or not hasattr(preprocessor,
                                                                                                "__dict__"):
        return preprocessor
    return (type(preprocessor), {k: v for k, v in vars(preprocessor).items() if not k.endswith("_")})


def _plan_bytes(client: Any, plans: dict[str, Any]) -> int:
    """The blocks' memory as the scheduler counts it (one call, no task per block)."""
    keys = [b.key for plan in plans.values() for b in plan.blocks]
    if not keys:
        return 0
    return int(sum(client.nbytes(keys, summary=False).values()))


def _drop_worker_matrices(client: Any, entry_keys: list[str]) -> None:
    with contextlib.suppress(Exception):  # a closed cluster holds nothing any more
        client.run(_drop_on_worker, list(entry_keys))


def _drop_on_worker(entry_keys: list[str], dask_worker: Any = None) -> None:
    matrices = worker_matrices(dask_worker)
    if matrices is not None:
        matrices.drop_entries(entry_keys)


_cache = PreparedCache()


def prepared_cache() -> PreparedCache:
    """This process's cache of prepared datasets."""
    return _cache


def stats() -> dict[str, Any]:
    """Entries, bytes, budget, hits, misses, evictions and rebuilds of the driver's cache, and the
    workers' matrices (``workers``: address -> their stats) when a cluster is connected."""
    found = _cache.stats()
    with contextlib.suppress(Exception):
        from distributed import get_client

        found["workers"] = get_client().run(_worker_stats)
    return found


def usage_since(before: dict[str, Any]) -> dict[str, Any]:
    """What the caches did since ``before`` (a :func:`stats`): the driver's hits, misses, evictions and
    rebuilds, the bytes it holds now, and the same of the workers' matrices (summed; a worker that
    started since counts from zero). Fits of other experiments in this process meanwhile count too."""
    now = stats()

    def change(after: dict[str, Any], earlier: dict[str, Any], names: tuple[str, ...]) -> dict[str, int]:
        return {name: int(after.get(name, 0)) - int(earlier.get(name, 0)) for name in names}

    workers = {"hits": 0, "misses": 0, "evictions": 0, "bytes": 0}
    for address, found in now.get("workers", {}).items():
        moved = change(found, before.get("workers", {}).get(address, {}), ("hits", "misses", "evictions"))
        for name, value in {**moved, "bytes": int(found.get("bytes", 0))}.items():
            workers[name] += value
    return {**change(now, before, ("hits", "misses", "evictions", "rebuilds")), "bytes": int(now["bytes"]),
            "workers": workers}


def _worker_stats(dask_worker: Any = None) -> dict[str, Any]:
    matrices = worker_matrices(dask_worker)
    return matrices.stats() if matrices is not None else {}


def release_scope(scope: str) -> None:
    """Forget what the experiment ``scope`` prepared (called when it ends)."""
    client = None
    with contextlib.suppress(Exception):
        from distributed import get_client

        client = get_client()
    _cache.release_scope(scope, client)


# -- on the workers ------------------------------------------------------------------------------
class WorkerMatrices:
    """What GBDT ranks built from their shards, on one worker; see the module docstring."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._items: OrderedDict[tuple[Any, ...], tuple[Any, int, str]] = OrderedDict()
        self._lock = threading.Lock()
        self.counts = {"hits": 0, "misses": 0, "evictions": 0}

    def get(self, key: tuple[Any, ...]) -> Any:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.counts["misses"] += 1
                return None
            self._items.move_to_end(key)
            self.counts["hits"] += 1
            return found[0]

    def put(self, key: tuple[Any, ...], value: Any, nbytes: int, entry: str) -> None:
        with self._lock:
            self._items[key] = (value, nbytes, entry)
            while len(self._items) > 1 and sum(n for _, n, _ in self._items.values()) > self.budget_bytes:
                self._items.popitem(last=False)
                self.counts["evictions"] += 1

    def recount(self, value: Any, nbytes: int) -> None:
        """Count ``value``, if kept, at ``nbytes`` from now on (LightGBM's Datasets shrink once binned)."""
        with self._lock:
            for key, (held, _, entry) in self._items.items():
                if held is value:
                    self._items[key] = (held, int(nbytes), entry)

    def drop_entries(self, entries: list[str]) -> None:
        with self._lock:
            for key in [k for k, (_, _, e) in self._items.items() if e in entries]:
                del self._items[key]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"items": len(self._items), "bytes": sum(n for _, n, _ in self._items.values()),
                    "budget_bytes": self.budget_bytes, **self.counts}

    def close(self) -> None:
        with self._lock:
            self._items.clear()


def worker_matrices(worker: Any = None) -> WorkerMatrices | None:
    """The :class:`WorkerMatrices` of ``worker`` (default: the one running this task), kept in the
    airflowless plugin's state; None off an airflowless worker."""
    from distributed import get_worker

    from ..runtime.plugins import PLUGIN_NAME

    try:
        worker = worker or get_worker()
    except ValueError:
        return None
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return None
    state = plugin.state
    found = state.get(WORKER_STATE_KEY)
    if found is None:
        limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None) or 4 << 30
        found = state.setdefault(WORKER_STATE_KEY, WorkerMatrices(max(64 << 20, int(limit * WORKER_BUDGET_FRACTION))))
    return found  # type: ignore[no-any-return]
