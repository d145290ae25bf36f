"""The one door to the private or undocumented parts of the other libraries airflowless uses.

The same rule as :mod:`._dask_internals` for uvicorn, Bokeh, XGBoost, LightGBM,
Optuna and HyperOpt: what has no public spelling lives here, one small named
function each, saying what it touches and why; callers import these names,
never a ``_``-attribute of those libraries; ``tests/test_library_internals.py``
has a test per function against the real library, so an upgrade that breaks
one fails there, by name.

To add one: a function here with that docstring, a test there, and the caller
importing it from this module.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bokeh_close_after_keep_alive", "fastapi_route_with_endpoint", "hyperopt_trial_doc",
           "let_starlette_state_pickle", "lightgbm_log_here", "optuna_storage_id", "uvicorn_bound_port",
           "xgboost_log_here"]


def uvicorn_bound_port(server: Any) -> int:
    """The port a started ``uvicorn.Server`` listens on (``port=0`` picks one).

    Reads ``uvicorn.Server.servers`` (undocumented): uvicorn has no public way to
    ask the bound address, and the asyncio servers it started know it.
    """
    return int(server.servers[0].sockets[0].getsockname()[1])


def bokeh_close_after_keep_alive() -> None:
    """A dashboard tab whose connection drops no longer logs an ``AssertionError`` traceback.

    Bokeh's server pings every websocket on a timer (distributed sets it to
    every 500 ms); a ping that finds the socket already closed calls
    ``BokehTornado.client_lost``, which detaches the connection's session. When
    that ping runs before Tornado's ``on_close`` (a tab closed or killed with a
    TCP reset while the dashboard was writing an update), ``WSHandler.on_close``
    then reads ``connection.session``, whose ``assert self._session is not
    None`` fails, and Tornado logs "Uncaught exception GET /status/ws" with the
    traceback into the process running the scheduler: with an embedded
    cluster, the user's console. Nothing is wrong: the session was already let
    go. This wraps ``WSHandler.on_close`` (undocumented): a connection whose
    session is detached (``ServerConnection._session`` is None) was already
    handed back, so the original only logs the close. Idempotent.
    """
    from bokeh.server.views.ws import WSHandler

    original = WSHandler.on_close
    if getattr(original, "airflowless_guard", False):
        return

    def on_close(self: Any) -> None:
        connection = getattr(self, "connection", None)
        if connection is not None and connection._session is None:  # the keep-alive ping handed it back first
            self.connection = None  # so the original only logs the close
        original(self)

    on_close.airflowless_guard = True  # type: ignore[attr-defined]
    WSHandler.on_close = on_close  # type: ignore[method-assign]


def let_starlette_state_pickle() -> None:
    """Make Starlette's ``State`` (``app.state``, ``request.state``) survive a pickle round trip.

    Its ``__getattr__`` reads ``self._state`` before unpickling has set it, and
    recurses until Python gives up, so an app, or a function that uses one, did
    not pickle. A reducer registered with ``copyreg`` (which pickle and
    cloudpickle both consult) pickles it as the dict it holds.
    """
    import copyreg

    from starlette.datastructures import State

    copyreg.pickle(State, _reduce_state)


def _reduce_state(state: Any) -> tuple[Any, tuple[dict[str, Any]]]:
    return (type(state), (dict(vars(state)["_state"]),))


def fastapi_route_with_endpoint(route: Any, endpoint: Any) -> Any:
    """A new ``fastapi.routing.APIRoute`` like ``route`` whose endpoint is ``endpoint``.

    FastAPI reads an endpoint's signature (its parameters, dependencies, body)
    when the route is made, and has no call to swap an endpoint; each argument
    of ``APIRoute.__init__`` is read back from the attribute of the same name
    that the route keeps.
    """
    import inspect

    from fastapi.routing import APIRoute

    names = [name for name in inspect.signature(APIRoute.__init__).parameters if name not in ("self", "path", "endpoint")]
    return APIRoute(route.path, endpoint, **{name: getattr(route, name) for name in names if hasattr(route, name)})


def xgboost_log_here(callback: Any) -> bool:
    """Make XGBoost's native log lines of the calling thread go to ``callback`` (a
    ``ctypes.CFUNCTYPE(None, c_char_p)``); False if XGBoost refused.

    Calls ``xgboost.core._LIB.XGBRegisterLogCallback``: the callback is per
    thread, and XGBoost's Python package registers its own (``print``) only in
    the thread that imported it, with no public call to set it elsewhere.
    """
    from xgboost import core

    return bool(core._LIB.XGBRegisterLogCallback(callback) == 0)


def lightgbm_log_here() -> bool:
    """Make LightGBM's native log lines of the calling thread go to the logger given to
    ``lightgbm.register_logger``; False if LightGBM refused.

    Calls ``lightgbm.basic._LIB.LGBM_RegisterLogCallback`` with the package's own
    callback (``_LIB.callback``): the native callback is per thread, and the
    package registers it only in the thread that imported it.
    """
    from lightgbm import basic

    return bool(basic._LIB.LGBM_RegisterLogCallback(basic._LIB.callback) == 0)


def optuna_storage_id(trial: Any) -> int:
    """The id an Optuna storage knows ``trial`` (an ``optuna.Trial``) by.

    Reads ``optuna.Trial._trial_id``: Optuna has no public name for it (``number``
    counts within a study, the storage keys by this id), and both reading a
    trial's reported steps and restoring live trials need it.
    """
    return int(trial._trial_id)


def hyperopt_trial_doc(trials: Any, tid: int) -> dict[str, Any]:
    """The live document of trial ``tid`` in ``trials`` (a ``hyperopt.Trials``): set its
    ``result`` and ``state``, then call ``trials.refresh()``.

    Reads ``Trials._dynamic_trials``: ``Trials.trials`` is a copy made at the last
    refresh, and hyperopt has no public call to finish a trial that was asked
    for outside ``fmin`` (an ask-and-tell searcher's).
    """
    return next(doc for doc in trials._dynamic_trials if doc["tid"] == tid)
