"""The Kubernetes example of docs/deploy.md (docs/kubernetes/daskcluster.yaml), checked without a cluster.

There is no Kubernetes here. The test builds the same documents with
dask-kubernetes' own ``make_cluster_spec`` / ``make_worker_spec`` plus what
airflowless adds (the scheduler preloads, worker threads, memory and
resources, the record's settings), requires the YAML to be exactly that, and
validates every document against the operator's own CRD schemas (shipped in
the dask-kubernetes package), so the example stays what the operator accepts.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_module

EXAMPLE = Path(__file__).parents[2] / "docs" / "kubernetes" / "daskcluster.yaml"
IMAGE = "ghcr.io/your-org/airflowless:latest"
DB = {"name": "AIRFLOWLESS_DB", "valueFrom": {"secretKeyRef": {"name": "airflowless", "key": "db-url"}}}
TOKEN = {"name": "AIRFLOWLESS_TOKEN", "valueFrom": {"secretKeyRef": {"name": "airflowless", "key": "token"}}}
STORAGE = {"name": "AIRFLOWLESS_STORAGE", "value": "s3://your-bucket/airflowless"}


def _documents() -> dict[str, dict[str, Any]]:
    import yaml

    return {doc["kind"]: doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc}


def _sized(cpu: str, memory: str, gpus: int = 0) -> dict[str, dict[str, str]]:
    size = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"requests": dict(size), "limits": dict(size)}


def _airflowless_worker(worker: dict[str, Any], *, threads: int, memory: str, resources: str) -> None:
    """What airflowless adds to a dask-kubernetes worker: threads, memory, declared resources, settings."""
    container = worker["spec"]["containers"][0]
    container["args"] += ["--nthreads", str(threads), "--memory-limit", memory, "--resources", resources]
    container["env"] = [DB, STORAGE]


def _expected() -> dict[str, dict[str, Any]]:
    from dask_kubernetes.operator import make_cluster_spec, make_worker_spec

    cluster = make_cluster_spec(name="airflowless", image=IMAGE, n_workers=2)
    scheduler = cluster["spec"]["scheduler"]["spec"]["containers"][0]
    scheduler["args"] += ["--preload", "airflowless.dashboard", "--preload", "airflowless.runtime.adaptive"]
    scheduler["env"] = [DB, TOKEN, {"name": "DASK_DISTRIBUTED__ADAPTIVE__MAXIMUM", "value": "8"}]
    scheduler["resources"] = _sized("1", "2Gi")
    worker = cluster["spec"]["worker"]
    worker["spec"]["containers"][0]["resources"] = _sized("1", "4Gi")
    _airflowless_worker(worker, threads=1, memory="4GiB", resources=f"CPU=1 MEMORY={4 * 2**30}")

    gpu = make_worker_spec(image=IMAGE, n_workers=1, resources=_sized("4", "16Gi", gpus=1))
    _airflowless_worker(gpu, threads=4, memory="16GiB", resources=f"CPU=4 GPU=1 MEMORY={16 * 2**30}")
    group = {"apiVersion": "kubernetes.dask.org/v1", "kind": "DaskWorkerGroup",
             "metadata": {"name": "airflowless-gpu"}, "spec": {"cluster": "airflowless", "worker": gpu}}
    autoscaler = {"apiVersion": "kubernetes.dask.org/v1", "kind": "DaskAutoscaler",
                  "metadata": {"name": "airflowless"}, "spec": {"cluster": "airflowless", "minimum": 1, "maximum": 8}}
    return {"DaskCluster": cluster, "DaskWorkerGroup": group, "DaskAutoscaler": autoscaler}


def test_the_example_is_what_dask_kubernetes_builds_plus_airflowless() -> None:
    require_module("dask_kubernetes")
    found, expected = _documents(), _expected()
    assert sorted(found) == sorted(expected)
    for kind in expected:
        assert found[kind] == expected[kind], f"{EXAMPLE} and the spec built here differ in {kind}"


def _crd_schema(kind: str) -> dict[str, Any]:
    return copy.deepcopy(_load_crd_schema(kind))


@functools.cache
def _load_crd_schema(kind: str) -> dict[str, Any]:
    import yaml
    from dask_kubernetes import operator

    crds = Path(operator.__file__).parent / "deployment" / "helm" / "dask-kubernetes-operator" / "crds"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are large: libyaml when there
    crd = yaml.load((crds / f"{kind.lower()}.yaml").read_text(), Loader=loader)  # noqa: S506 - a safe loader
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["DaskCluster", "DaskWorkerGroup", "DaskAutoscaler"])
def test_each_document_is_valid_for_the_operators_crd(kind: str) -> None:
    require_module("dask_kubernetes")
    jsonschema = require_module("jsonschema")
    jsonschema.validate(_documents()[kind], _crd_schema(kind))  # type: ignore[attr-defined]


def test_a_broken_document_is_refused_by_the_same_schema() -> None:
    require_module("dask_kubernetes")
    jsonschema = require_module("jsonschema")
    broken = _documents()["DaskCluster"]
    del broken["spec"]["worker"]["spec"]
    with pytest.raises(jsonschema.ValidationError):  # type: ignore[attr-defined]
        jsonschema.validate(broken, _crd_schema("DaskCluster"))  # type: ignore[attr-defined]


def test_the_scheduler_preloads_and_the_workers_resources_are_what_airflowless_reads() -> None:
    from airflowless.runtime.resources import spec_resources

    cluster = _documents()["DaskCluster"]
    args = cluster["spec"]["scheduler"]["spec"]["containers"][0]["args"]
    preloads = [args[i + 1] for i, arg in enumerate(args) if arg == "--preload"]
    assert preloads == ["airflowless.dashboard", "airflowless.runtime.adaptive"]
    for module in preloads:  # both are importable preload modules with Dask's hook
        assert callable(__import__(module, fromlist=["dask_setup"]).dask_setup)
    worker_args = cluster["spec"]["worker"]["spec"]["containers"][0]["args"]
    assert spec_resources({"options": {"worker_extra_args": worker_args}}) == {"CPU": 1.0, "MEMORY": 4 * 2**30}
    assert all(c["image"] == IMAGE for c in [cluster["spec"]["scheduler"]["spec"]["containers"][0],
                                             cluster["spec"]["worker"]["spec"]["containers"][0]])
