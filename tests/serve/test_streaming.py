"""Streaming answers (generators, StreamingResponse) and FastAPI ingress, on the real cluster over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from airflowless import serve
from airflowless.errors import ConfigError
from airflowless.serve.errors import ServeError
from airflowless.serve.wire import STREAM_WINDOW
from tests.support.eventually import eventually

from .stream_deployments import (
    BusyModels,
    Items,
    ManyModels,
    Models,
    Tokens,
    call_each_model_from_here,
)


@pytest.fixture(scope="module")
def tokens(serve_url: str) -> Iterator[serve.DeploymentHandle]:
    handle = serve.run(Tokens.bind(), name="tokens", route_prefix="/tokens")
    yield handle
    serve.delete("tokens")


def test_a_generator_method_streams_through_a_handle(tokens: serve.DeploymentHandle) -> None:
    streaming = tokens.options(stream=True)
    assert list(streaming.generate.remote(40)) == [f"token-{i}" for i in range(40)]  # more than one window

    async def collect() -> list[Any]:
        return [item async for item in streaming.agenerate.remote(5)]
    assert asyncio.run(collect()) == [{"i": i} for i in range(5)]


def test_a_stream_that_raises_gives_its_items_then_the_error(tokens: serve.DeploymentHandle) -> None:
    got = []
    with pytest.raises(ValueError, match="broke after 3"):
        for item in tokens.options(stream=True).failing.remote(3):
            got.append(item)
    assert got == [0, 1, 2]


def test_stream_and_plain_calls_are_not_mixed_up(tokens: serve.DeploymentHandle) -> None:
    with pytest.raises(ServeError, match="options\\(stream=True\\)"):
        tokens.generate.remote(2).result(timeout=30)
    with pytest.raises(ServeError, match="not a stream"):
        list(tokens.options(stream=True).one_value.remote())
    assert tokens.one_value.remote().result(timeout=30) == 1  # the replica's slots were given back


def test_a_slow_reader_holds_the_producer_back_and_leaving_cancels_it(tokens: serve.DeploymentHandle) -> None:
    stream = tokens.options(stream=True).endless.remote("slow")
    assert [next(stream) for _ in range(3)] == [1, 2, 3]
    # the producer runs at most a window ahead of what was read, however long the reader waits
    eventually(lambda: tokens.progress.remote("slow").result(timeout=30)[0] >= STREAM_WINDOW, timeout=30)
    asyncio.run(asyncio.sleep(0.5))
    produced, closed = tokens.progress.remote("slow").result(timeout=30)
    assert produced <= 3 + STREAM_WINDOW + 2 and not closed
    stream.cancel()
    eventually(lambda: tokens.progress.remote("slow").result(timeout=30)[1], timeout=30)


def test_a_streaming_response_goes_out_over_http_as_it_comes(serve_url: str, tokens: serve.DeploymentHandle) -> None:
    with httpx.stream("GET", f"{serve_url}/tokens?n=5", timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-lines"] == "5"
        assert list(response.iter_lines()) == [f"line {i}" for i in range(5)]


def test_a_client_that_leaves_a_stream_cancels_its_generator(serve_url: str, tokens: serve.DeploymentHandle
                                                             ) -> None:
    @serve.deployment
    class Endless:
        def __call__(self, request: Any) -> Any:
            from starlette.responses import StreamingResponse
            return StreamingResponse(tokens.options(stream=True).endless.remote("http"))

    serve.run(Endless.bind(), name="endless", route_prefix="/endless")
    try:
        with httpx.stream("GET", f"{serve_url}/endless", timeout=30) as response:
            assert next(response.iter_bytes()) != b""
        eventually(lambda: tokens.progress.remote("http").result(timeout=30)[1], timeout=30)
    finally:
        serve.delete("endless")


@pytest.fixture(scope="module")
def items(serve_url: str) -> Iterator[str]:
    serve.run(Items.bind("EUR"), name="items", route_prefix="/shop")
    yield f"{serve_url}/shop"
    serve.delete("items")


def test_a_fastapi_ingress_serves_its_routes_as_methods(items: str) -> None:
    created = httpx.post(f"{items}/items/7", json={"name": "pen", "price": 2.0}, timeout=30)
    assert created.status_code == 201 and created.json() == {"id": 7, "with_tax": 3.0}  # Depends() ran
    got = httpx.get(f"{items}/items/7", params={"q": "blue"}, timeout=30)
    assert got.json() == {"item": {"name": "pen", "price": 2.0}, "q": "blue", "currency": "EUR"}  # self is the replica
    assert httpx.get(f"{items}/health", timeout=30).json() == {"status": "ok"}  # a route outside the class
    assert serve.DeploymentHandle("items", "Items").size.remote().result(timeout=30) == 1  # handles still call methods


def test_a_fastapi_ingress_answers_errors_validation_and_openapi_as_fastapi(items: str) -> None:
    missing = httpx.get(f"{items}/items/99", timeout=30)
    assert missing.status_code == 404 and missing.json() == {"detail": "no item 99"}
    invalid = httpx.post(f"{items}/items/abc", json={"name": "pen"}, timeout=30)
    assert invalid.status_code == 422
    assert {tuple(error["loc"]) for error in invalid.json()["detail"]} == {("path", "item_id"), ("body", "price")}
    assert httpx.get(f"{items}/nowhere", timeout=30).status_code == 404
    schema = httpx.get(f"{items}/openapi.json", timeout=30).json()
    assert schema["info"]["title"] == "Items"
    parameters = {p["name"] for p in schema["paths"]["/items/{item_id}"]["get"]["parameters"]}
    assert parameters == {"item_id", "q"}  # no `self`
    docs = httpx.get(f"{items}/docs", timeout=30)
    assert docs.status_code == 200 and "/shop/openapi.json" in docs.text  # the page finds the schema under the prefix


def test_a_fastapi_ingress_streams(items: str) -> None:
    with httpx.stream("GET", f"{items}/count", timeout=30) as response:
        assert list(response.iter_lines()) == ["0", "1", "2", "3"]


def test_an_ingress_written_in_the_calling_module_travels_by_value(serve_url: str) -> None:
    from fastapi import FastAPI

    app = FastAPI()
    app.state.greeting = "hello"  # Starlette's State does not pickle by itself

    @serve.deployment
    @serve.ingress(app)
    class Greeter:
        def __init__(self, name: str) -> None:
            self.name = name

        @app.get("/")
        def root(self) -> str:
            return f"{app.state.greeting} from {self.name}"

    serve.run(Greeter.bind("local"), name="greeter", route_prefix="/greet")
    try:
        assert httpx.get(f"{serve_url}/greet", timeout=30).json() == "hello from local"
    finally:
        serve.delete("greeter")


def test_a_fastapi_lifespan_runs_from_the_replica_start_to_its_stop(serve_url: str, tmp_path: Path) -> None:
    from fastapi import FastAPI

    marks = str(tmp_path)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[dict[str, str]]:
        yield {"model": "loaded at startup"}
        Path(marks, "stopped").write_text("yes")

    app = FastAPI(lifespan=lifespan)

    @serve.deployment
    @serve.ingress(app)
    class WithLifespan:
        @app.get("/model")
        def model(self, request: Request) -> str:
            return str(request.state.model)

    serve.run(WithLifespan.bind(), name="lifespan", route_prefix="/life")
    try:
        assert httpx.get(f"{serve_url}/life/model", timeout=30).json() == "loaded at startup"
    finally:
        serve.delete("lifespan")
    eventually(lambda: (tmp_path / "stopped").exists(), timeout=30)

    @contextlib.asynccontextmanager
    async def broken(app: Any) -> AsyncIterator[None]:
        raise RuntimeError("no model file")
        yield

    broken_app = FastAPI(lifespan=broken)

    @serve.deployment
    @serve.ingress(broken_app)
    class Broken:
        pass

    with pytest.raises(ServeError, match="startup failed.*no model file"):
        serve.run(Broken.bind(), name="broken-life", route_prefix="/broken-life", timeout_s=60)
    assert "broken-life" not in serve.status()


def test_ingress_goes_on_a_class_with_an_app() -> None:
    with pytest.raises(ConfigError, match="ASGI app"):
        serve.ingress("not an app")
    with pytest.raises(ConfigError, match="goes on a class"):
        serve.ingress(lambda scope, receive, send: None)(lambda: None)


@pytest.fixture(scope="module")
def models(serve_url: str) -> Iterator[serve.DeploymentHandle]:
    handle = serve.run(Models.bind(), name="models", route_prefix="/models")
    yield handle
    serve.delete("models")


def test_a_multiplexed_model_is_loaded_once_on_its_home_replica(serve_url: str, models: serve.DeploymentHandle
                                                                ) -> None:
    async def many() -> list[Any]:
        calls = [models.options(multiplexed_model_id="a").remote({"x": i}) for i in range(6)]
        return list(await asyncio.gather(*calls))
    answers = asyncio.run(many())
    assert [a["model"] for a in answers] == ["a"] * 6 and [a["x"] for a in answers] == list(range(6))
    assert len({a["replica"] for a in answers}) == 1  # its home replica, while it has room
    over_http = [httpx.post(f"{serve_url}/models", json={"x": i}, headers={"serve_multiplexed_model_id": "b"},
                            timeout=30).json() for i in range(3)]
    assert {a["model"] for a in over_http} == {"b"} and len({a["replica"] for a in over_http}) == 1
    assert models.options(multiplexed_model_id="c").sync_id.remote().result(timeout=30) == "c"
    loads = [models.history.remote().result(timeout=30) for _ in range(8)]
    by_replica = {h["replica"]: h["loads"] for h in loads}
    assert sum(load.count("a") for load in by_replica.values()) == 1  # six calls, one load (they shared it)


def test_a_router_that_never_sent_a_model_finds_the_replica_that_holds_it(serve_url: str,
                                                                          cluster_client: Any) -> None:
    handle = serve.run(ManyModels.bind(), name="many-models", route_prefix=None)
    try:
        ids = [f"m{i}" for i in range(6)]
        homes = {m: handle.options(multiplexed_model_id=m).remote(None).result(timeout=30) for m in ids}
        deadline = time.monotonic() + 15  # the replicas' next probes report what they hold (about twice a second)
        while time.monotonic() < deadline and not _published_models("many-models", "ManyModels", len(ids)):
            time.sleep(0.2)
        seen = cluster_client.submit(call_each_model_from_here, handle, ids, pure=False).result(timeout=90)
        assert seen == homes  # each model's calls from the worker went where the driver had loaded it
        histories: dict[int, list[str]] = {}
        for _ in range(60):  # until both replicas answered
            answer = handle.history.remote().result(timeout=30)
            histories[answer["replica"]] = answer["loads"]
            if len(histories) == 2:
                break
        assert sorted(m for loads in histories.values() for m in loads) == ids  # loaded once each, in all
    finally:
        serve.delete("many-models")


def _published_models(app: str, deployment: str, count: int) -> bool:
    from distributed import get_client

    from airflowless.serve.replica_table import metadata_key

    table = get_client().get_metadata(metadata_key(app, deployment), None) or {}
    return sum(len(ids) for ids in table.get("models", {}).values()) >= count


def test_a_replica_keeps_its_most_recently_used_models() -> None:
    from airflowless.serve.multiplex import multiplexed

    loads: list[str] = []

    @multiplexed(max_num_models_per_replica=2)
    async def get_model(model_id: str) -> str:
        loads.append(model_id)
        return model_id.upper()

    async def use(*ids: str) -> list[str]:
        return [await get_model(i) for i in ids]
    assert asyncio.run(use("a", "b", "a", "c", "a", "b")) == ["A", "B", "A", "C", "A", "B"]
    assert loads == ["a", "b", "c", "b"]  # "b" was the least recently used when "c" came
    with pytest.raises(ConfigError, match="async def"):
        multiplexed(lambda model_id: model_id)
    with pytest.raises(ConfigError, match="positive int"):
        multiplexed(max_num_models_per_replica=0)


def test_a_model_s_calls_spill_to_another_replica_when_its_home_is_full(serve_url: str) -> None:
    handle = serve.run(BusyModels.bind(), name="busy-models", route_prefix=None)
    try:
        async def burst() -> list[Any]:
            calls = [handle.options(multiplexed_model_id="z").remote(None) for _ in range(6)]
            return list(await asyncio.gather(*calls))
        assert len(set(asyncio.run(burst()))) == 2  # the home took two at a time; the rest went to the other
    finally:
        serve.delete("busy-models")
