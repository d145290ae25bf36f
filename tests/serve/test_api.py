"""serve end to end: a real cluster, a real uvicorn on loopback, real HTTP."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from airflowless import serve

from .deployments import Batched, Broken, Echo, Ingress, Slow, SyncIngress, Threaded, double


def test_run_http_handle_status_delete(serve_url: str) -> None:
    handle = serve.run(Echo.bind("!"), name="echo", route_prefix="/echo")
    reply = httpx.post(f"{serve_url}/echo", json={"x": 1}).json()
    assert reply["got"] == {"x": 1} and reply["suffix"] == "!"
    assert httpx.post(f"{serve_url}/echo/shout", json="a").json() == {"up": "A"}
    assert handle.remote({"y": 2}).result(timeout=10)["got"] == {"y": 2}
    assert handle.shout.remote("b").result(timeout=10) == {"up": "B"}
    pids = {httpx.post(f"{serve_url}/echo", json=i).json()["pid"] for i in range(30)}
    assert len(pids) == 2  # two replicas, both used
    state = serve.status()["echo"]
    assert state["deployments"]["Echo"]["running_replicas"] == 2 and state["route_prefix"] == "/echo"
    ray_form = serve.status().applications["echo"]  # Ray's ServeStatus: attributes, states counted
    assert ray_form.status == "RUNNING" and ray_form.deployments["Echo"].status == "HEALTHY"
    assert ray_form.deployments["Echo"].replica_states == {"RUNNING": 2}
    assert httpx.get(f"{serve_url}/-/routes").json() == {"/echo": "echo"}
    assert httpx.get(f"{serve_url}/-/healthz").status_code == 200
    assert serve.get_app_handle("echo").remote(3).result(timeout=10)["got"] == 3
    serve.delete("echo")
    assert "echo" not in serve.status()
    missing = httpx.post(f"{serve_url}/echo", json=1)
    assert missing.status_code == 404 and "no application" in missing.json()["error"]
    with pytest.raises(serve.DeploymentNotFoundError):
        serve.get_app_handle("echo")


def test_composition_with_handles(serve_url: str) -> None:
    serve.run(Ingress.bind(Echo.bind("?")), name="composed", route_prefix="/c")
    reply = httpx.post(f"{serve_url}/c", json={"k": "v"}).json()
    assert reply["via"]["got"] == {"k": "v"} and reply["via"]["suffix"] == "?"
    assert reply["loud"] == {"up": "HI"}
    serve.delete("composed")


def test_a_sync_deployment_waits_for_a_handle_call_with_result(serve_url: str) -> None:
    serve.run(SyncIngress.bind(Echo.bind("?")), name="composed-sync", route_prefix="/cs")
    reply = httpx.post(f"{serve_url}/cs", json={"k": "v"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["via"]["got"] == {"k": "v"} and reply.json()["loud"] == {"up": "HI"}
    serve.delete("composed-sync")


def test_bad_input_is_4xx_and_fuzz_never_5xx(serve_url: str) -> None:
    serve.run(double.bind(), name="double", route_prefix="/double")
    url = f"{serve_url}/double"
    assert httpx.post(url, json={"x": 4}).json() == {"y": 8}
    bad = httpx.post(url, content=b"{not json")
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    wrong = httpx.post(url, json=[1, 2])
    assert wrong.status_code == 400 and "expected {'x': number}" in wrong.json()["error"]
    assert httpx.post(f"{url}/nope", json={}).status_code == 404
    assert httpx.post(url, content=b"").status_code == 400
    assert httpx.post(url, content=b"x" * (2 << 20)).status_code == 413
    rng = random.Random(0)
    junk: list[bytes] = [b"\xff\xfe\x00", b"NaN", b"[" * 100_000, b"1e999999", b'{"x": Infinity}',
                         b'{"x": ' + b"9" * 5000 + b"}", b"null", b'"\\ud800"']
    values = [None, True, "s", 1e300, -(10**30), [], {}, [[[]]], {"a": {"b": [1, {"c": None}]}}, 10**400]
    for _ in range(150):
        kind = rng.random()
        if kind < 0.4:
            junk.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
        else:
            import json

            body = {"x": rng.choice(values)} if kind < 0.8 else rng.choice(values)
            junk.append(json.dumps(body).encode())
    statuses = [httpx.post(url, content=body).status_code for body in junk]
    assert all(200 <= s < 500 for s in statuses), sorted(set(statuses))
    assert httpx.get(f"{serve_url}/-/healthz").status_code == 200  # the proxy survived
    serve.delete("double")


def test_overflow_is_503_with_a_clear_message(serve_url: str) -> None:
    serve.run(Slow.bind(), name="slow", route_prefix="/slow")

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(client.post(f"{serve_url}/slow", json={}) for _ in range(6)))

    replies = asyncio.run(burst())
    codes = sorted(r.status_code for r in replies)
    assert codes.count(200) == 2 and codes.count(503) == 4, codes
    message = next(r.json()["error"] for r in replies if r.status_code == 503)
    assert "overloaded" in message and "max_ongoing_requests" in message
    serve.delete("slow")


def test_batching_groups_concurrent_calls(serve_url: str) -> None:
    handle = serve.run(Batched.bind(), name="batched", route_prefix=None)

    async def many() -> list[dict]:
        return list(await asyncio.gather(*(_await(handle.remote({"x": i})) for i in range(20))))

    replies = asyncio.run(many())
    assert [r["x"] for r in replies] == list(range(20))
    assert max(r["batch"] for r in replies) == 8
    serve.delete("batched")


async def _await(response: serve.DeploymentResponse) -> dict:
    return await response  # type: ignore[no-any-return]


def test_a_replica_that_cannot_start_fails_run_with_its_error(serve_url: str) -> None:
    with pytest.raises(serve.ServeError, match="cannot load the model"):
        serve.run(Broken.bind(), name="broken", route_prefix="/broken", timeout_s=60)
    assert "broken" not in serve.status()


def test_max_concurrency_runs_plain_def_calls_in_that_many_threads(serve_url: str) -> None:
    def four_calls(handle: serve.DeploymentHandle) -> tuple[float, list[dict]]:
        started = time.monotonic()
        responses = [handle.remote(0.6) for _ in range(4)]
        replies = [response.result(timeout=30) for response in responses]
        return time.monotonic() - started, replies

    handle = serve.run(Threaded.bind(), name="threaded", route_prefix="/threaded")
    took, replies = four_calls(handle)
    assert took < 1.8, took  # together, not one after another (4 x 0.6 s)
    assert max(reply["most"] for reply in replies) == 4
    assert len({reply["thread"] for reply in replies}) == 4

    handle = serve.run(Threaded.options(max_concurrency=1).bind(), name="threaded", route_prefix="/threaded")
    took, replies = four_calls(handle)
    assert took >= 2.3, took  # Serve's default: one thread, calls in turn
    assert {reply["most"] for reply in replies} == {1}
    serve.delete("threaded")


def test_options_and_validation() -> None:
    assert Echo.options(num_replicas=3).config.num_replicas == 3
    with pytest.raises(ValueError, match="unknown deployment option"):
        Echo.options(num_replica=3)
    with pytest.raises(ValueError, match="max_ongoing_requests"):
        serve.deployment(max_ongoing_requests=0)(double.target)
    with pytest.raises(ValueError, match="route_prefix"):
        serve.run(double.bind(), route_prefix="nope")
    with pytest.raises(ValueError, match="max_concurrency"):
        Echo.options(max_concurrency=0)
    threaded = Echo.options(resources={"CPU": 2}).options(ray_actor_options={"max_concurrency": 8}).config
    assert (threaded.max_concurrency, threaded.resources) == (8, {"CPU": 2})  # its resources kept


def test_run_blocking_serves_until_ctrl_c(tmp_path: object) -> None:
    import os
    import signal
    import subprocess
    import sys

    script = """
from airflowless import serve

@serve.deployment
def hello(body):
    return {"hello": body["name"]}

serve.start(http_options={"port": 0})
serve.run(hello.bind(), name="hello", route_prefix="/hello", blocking=True)
print("returned after Ctrl-C", flush=True)
"""
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=env)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert "until Ctrl-C" in line, line
        address = line.split(" at ")[1].split()[0]
        assert httpx.post(f"{address}/hello", json={"name": "ray"}, timeout=30).json() == {"hello": "ray"}
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0 and "returned after Ctrl-C" in out
    finally:
        process.kill()
