"""airflowless._library_internals: one test per function, against the real library (an upgrade that breaks one
fails here, by name)."""

from __future__ import annotations

import asyncio
import ctypes
import socket
import threading
from typing import Any

import numpy as np
import pytest

from airflowless import _library_internals as internals


def test_uvicorn_bound_port() -> None:
    import uvicorn

    async def app(scope: dict, receive: object, send: object) -> None:  # never called
        raise AssertionError

    async def main() -> int:
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
        task = asyncio.ensure_future(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = internals.uvicorn_bound_port(server)
        with socket.create_connection(("127.0.0.1", port), timeout=10):  # something listens there
            pass
        server.should_exit = True
        await task
        return port

    assert asyncio.run(main()) > 0


def _in_a_thread(fn: Any) -> Any:
    """``fn()`` run in a new thread (the log callbacks are per thread: the test's own stays as it was)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(120)
    return out[0]


def test_xgboost_log_here() -> None:
    xgboost = pytest.importorskip("xgboost")
    lines: list[str] = []
    callback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(lambda message: lines.append(message.decode()))

    def train() -> bool:
        registered = internals.xgboost_log_here(callback)
        x = np.random.default_rng(0).random((64, 3))
        data = xgboost.DMatrix(x, label=x[:, 0])
        xgboost.train({"verbosity": 3, "tree_method": "hist", "nthread": 1}, data, num_boost_round=1)
        return registered

    assert _in_a_thread(train)
    assert lines  # XGBoost's own lines of that thread, not printed


def test_lightgbm_log_here() -> None:
    lightgbm = pytest.importorskip("lightgbm")
    lines: list[str] = []

    class Collect:
        def info(self, message: str) -> None:
            lines.append(message)

        def warning(self, message: str) -> None:
            lines.append(message)

    def train() -> bool:
        lightgbm.register_logger(Collect())
        registered = internals.lightgbm_log_here()
        x = np.random.default_rng(0).random((64, 3))
        lightgbm.train({"verbose": 1, "num_threads": 1, "min_data_in_leaf": 1}, lightgbm.Dataset(x, label=x[:, 0]),
                       num_boost_round=1)
        return registered

    assert _in_a_thread(train)
    assert any("[LightGBM]" in line for line in lines)


def test_optuna_storage_id() -> None:
    optuna = pytest.importorskip("optuna")
    study = optuna.create_study()
    study.ask()
    trial = study.ask()
    trial.report(0.5, 3)
    assert trial.storage.get_trial(internals.optuna_storage_id(trial)).intermediate_values == {3: 0.5}


def test_hyperopt_trial_doc() -> None:
    hyperopt = pytest.importorskip("hyperopt")
    from hyperopt import base, hp, rand

    trials = hyperopt.Trials()
    domain = base.Domain(lambda config: config, {"x": hp.uniform("x", 0, 1)})
    tids = trials.new_trial_ids(2)
    trials.insert_trial_docs(rand.suggest(tids, domain, trials, 0))
    trials.refresh()
    doc = internals.hyperopt_trial_doc(trials, tids[1])
    doc["result"] = {"loss": 0.25, "status": hyperopt.STATUS_OK}
    doc["state"] = hyperopt.JOB_STATE_DONE
    trials.refresh()
    assert [t["tid"] for t in trials.trials if t["state"] == hyperopt.JOB_STATE_DONE] == [tids[1]]
    assert trials.losses() == [None, 0.25]


def test_let_starlette_state_pickle() -> None:
    import pickle

    import cloudpickle
    from starlette.applications import Starlette

    internals.let_starlette_state_pickle()
    app = Starlette()
    app.state.model = {"w": 2}
    copy = pickle.loads(cloudpickle.dumps(app))
    assert copy.state.model == {"w": 2} and copy.state is not app.state


def test_fastapi_route_with_endpoint() -> None:
    fastapi = pytest.importorskip("fastapi")
    import asyncio

    import httpx

    app = fastapi.FastAPI()

    @app.get("/items/{item_id}", status_code=202, tags=["items"], response_model=dict)
    def original(item_id: int, q: str = "") -> dict:
        return {"from": "original"}

    def replacement(item_id: int, q: str = "") -> dict:
        return {"from": "replacement", "item_id": item_id, "q": q}

    route = app.router.routes[-1]
    app.router.routes[-1] = internals.fastapi_route_with_endpoint(route, replacement)
    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            return await client.get("/items/3", params={"q": "x"})
    answer = asyncio.run(get())
    assert answer.status_code == 202 and answer.json() == {"from": "replacement", "item_id": 3, "q": "x"}
    assert app.openapi()["paths"]["/items/{item_id}"]["get"]["tags"] == ["items"]


def test_bokeh_close_after_keep_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session the keep-alive ping let go before Tornado's on_close: no ``AssertionError`` logged."""
    import base64
    import os
    import re
    import urllib.request

    from bokeh.application import Application
    from bokeh.application.handlers.function import FunctionHandler
    from bokeh.server.server import Server
    from bokeh.server.views.ws import WSHandler
    from tornado.ioloop import IOLoop

    internals.bokeh_close_after_keep_alive()
    guarded, closed, raised = WSHandler.on_close, threading.Event(), []

    def on_close(handler: Any) -> None:  # the guarded on_close, watched (Tornado logs what it raises)
        try:
            guarded(handler)
        except BaseException as exc:
            raised.append(exc)
            raise
        finally:
            closed.set()

    monkeypatch.setattr(WSHandler, "on_close", on_close)
    started, held = threading.Event(), {}

    def serve() -> None:
        loop = IOLoop()
        server = Server({"/status": Application(FunctionHandler(lambda doc: None))}, io_loop=loop, port=0,
                        address="127.0.0.1", allow_websocket_origin=["*"])
        server.start()
        held.update(loop=loop, server=server)
        started.set()
        loop.start()

    threading.Thread(target=serve, daemon=True).start()
    assert started.wait(10)
    loop, server = held["loop"], held["server"]
    port = server.port
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10).read().decode()
    token = re.search(r'"token":\s*"([^"]+)"', page).group(1)  # type: ignore[union-attr]
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall((f"GET /status/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
                  f"Sec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1:{port}\r\n"
                  f"Sec-WebSocket-Protocol: bokeh, {token}\r\n\r\n").encode())
    received = b""
    while b"ACK" not in received:  # the session is open
        chunk = sock.recv(65536)
        assert chunk, f"the bokeh server closed the websocket before its ACK: {received!r}"
        received += chunk
    tornado_app = server._tornado
    lost = threading.Event()

    def ping_found_it_closed() -> None:  # what BokehTornado._keep_alive does on WebSocketClosedError
        for connection in list(tornado_app._clients):
            tornado_app.client_lost(connection)
        lost.set()

    loop.add_callback(ping_found_it_closed)
    assert lost.wait(10)
    sock.close()  # then Tornado's on_close runs
    assert closed.wait(10), "the server never closed its side of the websocket"
    loop.add_callback(lambda: (server.stop(), loop.stop()))
    assert not raised, raised
    assert not tornado_app._clients
