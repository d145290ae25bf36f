"""Model multiplexing, as in Ray Serve: many models behind one deployment, each loaded on few replicas.

>>> from airflowless import serve
>>> @serve.deployment(num_replicas=2)
... class Models:
...     @serve.multiplexed(max_num_models_per_replica=3)
...     async def get_model(self, model_id: str):
...         return {"id": model_id}                     # load it: from a path, a registry...
...     async def __call__(self, body):
...         model = await self.get_model(serve.get_multiplexed_model_id())
...         return {"model": model["id"], "x": body["x"]}

A request names its model with the HTTP header ``serve_multiplexed_model_id``,
a handle call with ``handle.options(multiplexed_model_id="a")``; inside the
replica ``serve.get_multiplexed_model_id()`` tells which. ``get_model(id)``
loads a model the first time its replica is asked for it and keeps the
``max_num_models_per_replica`` most recently used ones: before it loads
another, it drops the least recently used (its ``__del__`` runs, as when any
last reference goes), so at most that many are held, loads in flight
counted. Calls for a model still loading wait for that one load.

Routing: a router sends a model's requests to the replica it last sent that
model to, while that replica has room under ``max_ongoing_requests``; else to
the least busy replica that has the model loaded, as its replicas report it
(each health or metrics probe of the controller, about once a second, carries
the ids a replica holds, and the controller publishes them with the replica
table every router reads); otherwise to the least busy replica, which becomes
the model's home. So a model is loaded on one replica while one suffices, on
more under load, and a router that never sent a model anywhere (a handle in
another process, a second proxy) still finds where it is loaded. A class's
models are reported; a multiplexed plain function's are not.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ..errors import ConfigError, UsageError

__all__ = ["multiplexed", "get_multiplexed_model_id", "MODEL_ID_HEADER", "model_id_scope", "ModelHomes",
           "loaded_models"]

MODEL_ID_HEADER = "serve_multiplexed_model_id"
"""The HTTP header naming the model a request is for."""

_model_id: ContextVar[str] = ContextVar("serve_multiplexed_model_id", default="")


def get_multiplexed_model_id() -> str:
    """The model id the request being handled is for ("" when it names none)."""
    return _model_id.get()


def model_id_scope(model_id: str) -> Any:
    """Set the request's model id in the current context (a replica does this per request)."""
    return _model_id.set(model_id)


def multiplexed(fn: Any = None, *, max_num_models_per_replica: int = 3) -> Any:
    """Make ``async def get_model(self, model_id)`` a per-replica cache of loaded models (see the module)."""
    if isinstance(max_num_models_per_replica, bool) or not isinstance(max_num_models_per_replica, int) \
            or max_num_models_per_replica < 1:
        raise ConfigError(f"max_num_models_per_replica must be a positive int, got {max_num_models_per_replica!r}")

    def wrap(load: Callable[..., Any]) -> Any:
        if not inspect.iscoroutinefunction(load):
            raise ConfigError(f"@serve.multiplexed goes on an `async def` that loads one model by id, got "
                              f"{getattr(load, '__qualname__', load)!r}; write `async def get_model(self, model_id)`")
        caches: dict[int, _Models] = {}  # for a function: one cache; for a method: one per instance (below)

        @functools.wraps(load)
        async def get_model(*args: Any) -> Any:
            *owner, model_id = args
            if not isinstance(model_id, str):
                raise UsageError(f"{load.__name__}(model_id) takes the model id as a str, got "
                                 f"{type(model_id).__name__}; pass serve.get_multiplexed_model_id()")
            if owner:
                models = vars(owner[0]).setdefault(f"__airflowless_models_{load.__name__}",
                                                   _Models(max_num_models_per_replica))
            else:
                models = caches.setdefault(0, _Models(max_num_models_per_replica))
            return await models.get(model_id, functools.partial(load, *owner))
        return get_model

    return wrap(fn) if fn is not None else wrap


def loaded_models(user: Any) -> list[str]:
    """The ids of the models a replica's instance ``user`` holds, in all its multiplexed loaders."""
    try:  # a plain def method may add an attribute from its thread meanwhile: copy before iterating
        caches = [value for value in list(getattr(user, "__dict__", {}).values()) if isinstance(value, _Models)]
        return sorted({model_id for cache in caches for model_id in list(cache.loaded)})
    except RuntimeError:  # changed while copied: the next probe reports them
        return []


class _Models:
    """The loaded models of one replica, most recently used last; loads in flight are shared."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.loaded: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.loading: dict[str, asyncio.Future[Any]] = {}

    async def get(self, model_id: str, load: Callable[[str], Any]) -> Any:
        if model_id in self.loaded:
            self.loaded.move_to_end(model_id)
            return self.loaded[model_id]
        if model_id not in self.loading:
            while self.loaded and len(self.loaded) + len(self.loading) >= self.limit:  # room first (GPU memory)
                self.loaded.popitem(last=False)
            self.loading[model_id] = asyncio.ensure_future(load(model_id))
        future = self.loading[model_id]
        try:
            model = await asyncio.shield(future)
        finally:
            if future.done() and self.loading.get(model_id) is future:
                del self.loading[model_id]
        if model_id not in self.loaded:
            self.loaded[model_id] = model
            while len(self.loaded) > self.limit:
                self.loaded.popitem(last=False)
        return model


class ModelHomes:
    """Which replica a router last sent each model to (bounded: the least recently used ids are forgotten)."""

    def __init__(self, limit: int = 4096) -> None:
        self._homes: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._limit = limit

    def get(self, model_id: str) -> str | None:
        return self._homes.get(model_id)

    def set(self, model_id: str, replica_id: str) -> None:
        self._homes[model_id] = replica_id
        self._homes.move_to_end(model_id)
        if len(self._homes) > self._limit:
            self._homes.popitem(last=False)
