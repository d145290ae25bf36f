"""Shared by the W5 cases: the model, its checkpoint, the request, and the load generator.

``python w5_common.py load URL SECONDS CONCURRENCY`` runs the load in its own
process (raw asyncio HTTP/1.1 keep-alive connections) and prints one JSON line.
"""

import asyncio
import json
import os
import pickle
import statistics
import sys
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


def run_load(url, seconds=SECONDS, concurrency=CONCURRENCY):
    """Run the load generator in a second process; return its figures."""
    import subprocess

    out = subprocess.run([sys.executable, __file__, "load", url, str(seconds), str(concurrency)],
                         capture_output=True, text=True, timeout=seconds + 120)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"load generator failed: {out.stderr[-2000:]}")


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
            "requests": len(latencies), "statuses": {str(k): v for k, v in statuses.items()}}


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "load":
    print(json.dumps(asyncio.run(_load(sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))), flush=True)
