"""The embedded cluster: worker planning (pure) and init/shutdown on real processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import airflowless
from airflowless.errors import ConfigError
from airflowless.runtime.resources import detect_gpus, plan_workers


def test_plan_without_gpus_is_one_single_thread_worker_per_core() -> None:
    plans = plan_workers(cpus=4)
    assert [p.resources for p in plans] == [{"CPU": 1.0}] * 4
    assert all(p.nthreads == 1 and not p.env for p in plans)
    assert len(plan_workers(cpus=4, n_workers=2, threads_per_worker=2)) == 2


def test_plan_with_gpus_pins_one_gpu_per_worker_and_keeps_cores_for_data() -> None:
    plans = plan_workers(cpus=8, gpus=("0", "3"))
    gpu_plans, cpu_plans = plans[:2], plans[2:]
    assert [p.env for p in gpu_plans] == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "3"}]
    assert [p.resources for p in gpu_plans] == [{"CPU": 1.0, "GPU": 1.0}] * 2
    assert [p.resources for p in cpu_plans] == [{"CPU": 1.0}] * 6
    assert [p.env for p in cpu_plans] == [{"CUDA_VISIBLE_DEVICES": ""}] * 6  # they see no GPU

    # the lent device's shape: 16 cores, one H100
    one_gpu = plan_workers(cpus=16, gpus=("0",))
    assert [(p.name, p.nthreads) for p in one_gpu[:2]] == [("gpu-0", 4), ("cpu-0", 1)]
    assert len(one_gpu) == 13 and sum(p.resources["CPU"] for p in one_gpu) == 16
    assert [p.name for p in plan_workers(cpus=1, gpus=("0",))] == ["gpu-0"]  # no core left for a CPU worker


@pytest.mark.parametrize(("visible", "expected"), [("0,1", ("0", "1")), ("", ()), ("-1", ()), ("2", ("2",))])
def test_detect_gpus_from_cuda_visible_devices(visible: str, expected: tuple[str, ...]) -> None:
    assert detect_gpus(visible) == expected


def test_init_is_idempotent_and_installs_the_plugin(cluster_client) -> None:  # noqa: ANN001
    assert airflowless.init() is cluster_client
    assert airflowless.is_initialized()
    workers = cluster_client.scheduler_info(n_workers=-1)["workers"].values()
    assert [w["resources"] for w in workers] == [{"CPU": 1.0}, {"CPU": 1.0}]
    has_plugin = cluster_client.run(lambda dask_worker: "airflowless" in dask_worker.plugins)
    assert list(has_plugin.values()) == [True, True]


def test_init_refuses_to_switch_clusters_silently(cluster_client) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError, match="already connected"):
        airflowless.init("tcp://127.0.0.1:1")


def test_unreachable_address_is_a_clear_error() -> None:
    code = ("import airflowless\n"
            "try:\n    airflowless.init('tcp://127.0.0.1:9', quiet=True)\n"
            "except airflowless.errors.ClusterError as e:\n    print('CLUSTER-ERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "CLUSTER-ERROR cannot reach a Dask scheduler at 'tcp://127.0.0.1:9'" in out.stdout, out.stderr


def test_import_is_light() -> None:
    code = ("import sys, airflowless, airflowless.runtime\n"
            "heavy = {'torch', 'xgboost', 'lightgbm', 'sqlalchemy', 'sklearn'} & set(sys.modules)\n"
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
