"""A driver for the TLS tests, run as ``python -m tests.serve.tls_app`` (never imported by them).

With ``AIRFLOWLESS_ADDRESS`` (and ``AIRFLOWLESS_TLS_*``) set it joins that
cluster; otherwise it starts an embedded one with ``init(security=FOLDER)``,
FOLDER (its first argument) holding certificates made by ``tls.generate``.
``--no-fit`` leaves the XGBoost fit out, ``--no-serve`` the deployment (a test
that already covers them elsewhere).
Either way it runs a small pipeline, a 2-rank XGBoost fit, and a deployment
it calls over HTTPS with the cluster's certificate, then prints one JSON
line: what ran and every port airflowless opened (scheduler, workers and
their nannies, dashboards, the serve data plane, the serve HTTP ingress) and
the folder of certificates. It keeps everything up until a line arrives on
stdin, so the test can knock on those ports.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    return host.strip("[]"), int(port)


def main() -> None:
    import httpx
    import pandas as pd

    import airflowless
    from airflowless import data, serve
    from airflowless.dag import pipeline, stage
    from airflowless.runtime.cluster import get_client
    from airflowless.train import ScalingConfig
    from airflowless.train.xgboost import XGBoostTrainer
    from tests.support.tls_driver import dask_ports

    args = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    folder = args[0] if args else None
    client = airflowless.init(security=folder, n_workers=2, dashboard_address=":0", quiet=True)

    @stage
    def numbers(n: int) -> list[int]:
        return list(range(n))

    @stage
    def total(values: list[int]) -> int:
        with airflowless.cluster_client() as inner:  # a task launching tasks, on tls:// too
            return int(sum(inner.gather(inner.map(lambda v: v * 2, values))))

    @pipeline
    def small(n: int = 10) -> dict[str, Any]:
        return {"total": total(numbers(n))}

    result = small.run({"n": 10}, client=client)
    frame = pd.DataFrame({"x": [float(i % 7) for i in range(400)], "y": [i % 2 for i in range(400)]})
    fit = None if "--no-fit" in sys.argv else XGBoostTrainer(
        label_column="y", params={"objective": "binary:logistic"}, num_boost_round=2,
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": data.from_pandas([frame[:200], frame[200:]])}).fit()

    @serve.deployment(num_replicas=2)
    class Doubler:
        def __call__(self, body: Any) -> Any:
            return {"double": body["x"] * 2}

    serving = "--no-serve" not in sys.argv
    url, status, answer, handle_answer = None, None, None, None
    if serving:
        serve.start(http_options={"port": 0})
        serve.run(Doubler.bind(), name="tls", route_prefix="/double", timeout_s=60)
        url = serve.http_address()
        response = httpx.post(f"{url}/double", json={"x": 21}, verify=serve.http_client_ssl() or True, timeout=30)
        status, answer = response.status_code, response.json()
        handle_answer = serve.get_app_handle("tls").remote({"x": 4}).result(timeout=30)

    ports = dask_ports(client)
    if url is not None:
        table = get_client().get_metadata(["airflowless-serve", "tls", "Doubler"])
        for row in table["replicas"]:
            ports.append({"kind": "serve data plane", "host": row[1], "port": int(row[2]), "protocol": "wire"})
        host, port = _host_port(url)
        ports.append({"kind": "serve HTTP ingress", "host": host, "port": port, "protocol": "http"})

    print(json.dumps({
        "pipeline": result.value, "fit_error": None if fit is None or fit.error is None else str(fit.error),
        "fit_rounds": None if fit is None else (fit.metrics or {}).get("boosting_round"),
        "url": url, "status": status, "answer": answer, "handle": handle_answer,
        "address": client.scheduler.address, "ports": ports,
    }), flush=True)
    sys.stdin.readline()
    if serving:
        serve.shutdown()
    airflowless.shutdown()


if __name__ == "__main__":
    main()
