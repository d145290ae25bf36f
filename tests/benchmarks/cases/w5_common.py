"""Shared by the W5 cases: the model, its checkpoint, the request, and the load generator.

The load is WORKLOADS.md's: ``wrk -t2 -c32 -d20s`` posting :data:`ROW` as JSON
(a Lua script sets the method, body and Content-Type and prints the figures as
one JSON line). Without wrk on PATH, ``python w5_common.py load URL SECONDS
CONCURRENCY`` runs raw asyncio HTTP/1.1 keep-alive connections in a second
process instead (it saturates before the servers do: figures are marked
``"generator": "python"``).
"""

import asyncio
import json
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time

FEATURES = ["passenger_count", "trip_distance", "fare_amount", "trip_duration", "hour", "day_of_week"]
ROW = {"passenger_count": 1, "trip_distance": 2.4, "fare_amount": 11.5, "trip_duration": 840.0,
       "hour": 17, "day_of_week": 3}
SECONDS = float(os.environ.get("W5_SECONDS", "20"))
CONCURRENCY = int(os.environ.get("W5_CONCURRENCY", "32"))


def make_checkpoint(folder):
    """A LogisticRegression on the 6 taxi features, written as a trainer would (model.pkl)."""
    from sklearn.linear_model import LogisticRegression

    from airflowless.datasets.taxi import add_features, taxi_table

    frame = add_features(taxi_table(20_000, seed=0).to_pandas())
    model = LogisticRegression(max_iter=500).fit(frame[FEATURES], frame["is_big_tip"])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.pkl"), "wb") as f:
        pickle.dump(model, f)
    return folder


WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = [[%s]]
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %%d, "seconds": %%f, "p50_ms": %%f, "p99_ms": %%f, "max_ms": %%f, '
    .. '"errors": %%d, "status_errors": %%d}\\n', summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3,
    e.connect + e.read + e.write + e.timeout + e.status, e.status))
end
"""


def server_cpu_seconds(pids):
    """CPU seconds (user + system) the server processes ``pids`` have used so far."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def run_load(url, seconds=SECONDS, concurrency=CONCURRENCY, server_pids=()):
    """Run the load generator (wrk, else the Python one) in a second process; return its figures.

    With ``server_pids``, also the servers' CPU milliseconds per request (a figure the
    other helpers' load on a shared machine moves less than latency).
    """
    import subprocess

    cpu_before = server_cpu_seconds(server_pids)

    if shutil.which("wrk"):
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(WRK_SCRIPT % json.dumps(ROW))
        command = ["wrk", "-t2", f"-c{concurrency}", f"-d{seconds:g}s", "--timeout", "10s", "-s", script.name, url]
    else:
        command = [sys.executable, __file__, "load", url, str(seconds), str(concurrency)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            figures = json.loads(line)
            if "seconds" in figures:  # wrk's
                figures = {"requests_per_s": figures["requests"] / figures["seconds"], **figures,
                           "generator": "wrk"}
            cpu = server_cpu_seconds(server_pids) - cpu_before
            return {**figures, "load_average": os.getloadavg()[0],
                    "server_cpu_ms_per_request": cpu * 1e3 / max(figures["requests"], 1)}
    raise RuntimeError(f"load generator failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")


async def _load(url, seconds, concurrency):
    host, _, rest = url.removeprefix("http://").partition(":")
    port, _, path = rest.partition("/")
    body = json.dumps(ROW).encode()
    request = (f"POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    latencies, errors, statuses = [], 0, {}
    stop_at = time.perf_counter() + seconds

    async def connection():
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            statuses[status] = statuses.get(status, 0) + 1
            if status != 200:
                errors += 1
        writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {"requests_per_s": len(latencies) / elapsed, "p50_ms": statistics.median(latencies) * 1e3,
            "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3, "errors": errors,
            "requests": len(latencies), "statuses": {str(k): v for k, v in statuses.items()},
            "generator": "python"}


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "load":
    print(json.dumps(asyncio.run(_load(sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))), flush=True)
