"""GPU workers, proven on a GPU: placement, Train on NCCL, fractional GPUs for trials, GPU maps, serve, scoring,
TorchPredictor.

Skipped with the reason where PyTorch sees no CUDA device (tests/gpu/conftest.py).
On a lent machine: ``bash tests/gpu/run_on_device.sh``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.models import FEATURES, LABEL, MLPPredictor, OnDevice, gpu_trial, train_loop

ROWS = 60_000


@pytest.fixture(scope="module")
def taxi(tmp_path_factory: pytest.TempPathFactory) -> str:
    from airflowless.datasets import make_taxi

    path = str(tmp_path_factory.mktemp("gpu-taxi") / "taxi-s")
    make_taxi(ROWS, n_files=4, path=path, seed=0)
    return path


def _dataset(path: str) -> Any:
    from airflowless import data
    from airflowless.datasets import add_features

    return data.read_parquet(path).map_batches(add_features, batch_format="pyarrow").select_columns(
        [*FEATURES, LABEL])


PLAN = '''
import json
import airflowless

client = airflowless.init(quiet=True, dashboard_address=None)

def sees_cuda():
    import torch
    return torch.cuda.is_available()

workers = client.scheduler_info(n_workers=-1)["workers"]
cuda = client.run(sees_cuda)
print(json.dumps([{"resources": w["resources"], "nthreads": w["nthreads"], "cuda": cuda[a]}
                  for a, w in workers.items()]))
airflowless.shutdown()
'''


def test_init_plans_a_gpu_worker_and_cpu_workers_for_the_rest(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", PLAN], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    workers = json.loads(done.stdout.strip().splitlines()[-1])
    gpu = [w for w in workers if w["resources"].get("GPU")]
    cpu = [w for w in workers if not w["resources"].get("GPU")]
    import torch

    assert len(gpu) == torch.cuda.device_count() and all(w["cuda"] for w in gpu), workers
    assert cpu and not any(w["cuda"] for w in cpu), workers  # data work has processes of its own, GPU-free
    assert sum(w["nthreads"] for w in workers) == os.cpu_count(), workers
    print(f"\nGPU-PLACEMENT gpu workers {[(w['nthreads'], w['resources']) for w in gpu]}, "
          f"{len(cpu)} CPU-only workers")


def _fit(path: str, use_gpu: bool) -> Any:
    from airflowless.train import RunConfig, ScalingConfig
    from airflowless.train.torch import TorchTrainer

    trainer = TorchTrainer(train_loop, train_loop_config={"epochs": 2},
                           scaling_config=ScalingConfig(num_workers=1, use_gpu=use_gpu),
                           datasets={"train": _dataset(path)},
                           run_config=RunConfig(name=f"gpu-suite-{'gpu' if use_gpu else 'cpu'}"))
    result = trainer.fit()
    assert result.error is None, result.error
    return result


def test_torch_trainer_on_the_gpu_matches_the_cpu_run(cluster_client: Any, taxi: str) -> None:
    on_gpu, on_cpu = _fit(taxi, use_gpu=True), _fit(taxi, use_gpu=False)
    assert on_gpu.metrics["device"] == "cuda:0" and on_gpu.metrics["cuda_bytes"] > 0
    assert on_cpu.metrics["device"] == "cpu"
    assert abs(on_gpu.metrics["loss"] - on_cpu.metrics["loss"]) < 0.01, (on_gpu.metrics, on_cpu.metrics)
    print(f"\nGPU-TRAIN loss on cuda {on_gpu.metrics['loss']:.4f}, on cpu {on_cpu.metrics['loss']:.4f}")


def test_four_trials_share_one_gpu(cluster_client: Any) -> None:
    from airflowless import tune

    trainable = tune.with_resources(gpu_trial, {"CPU": 0, "GPU": 0.25})
    grid = tune.Tuner(trainable, param_space={"seconds": 4.0, "i": tune.grid_search([0, 1, 2, 3])},
                      tune_config=tune.TuneConfig(metric="steps", mode="max")).fit()
    results = [r.metrics for r in grid]
    assert len(results) == 4 and all(r["device"].startswith("cuda") for r in results), results
    latest_start, earliest_end = max(r["start"] for r in results), min(r["end"] for r in results)
    assert latest_start < earliest_end, results  # all four ran at the same time on the one GPU
    print(f"\nGPU-TUNE 4 trials at GPU=0.25 overlapped for {earliest_end - latest_start:.1f} s")


def test_map_batches_with_num_gpus_runs_its_model_on_cuda(cluster_client: Any, taxi: str) -> None:
    rows = _dataset(taxi).limit(5_000).map_batches(OnDevice, num_gpus=1, batch_size=1024).take_all()
    assert len(rows) == 5_000
    assert {row["device"] for row in rows} == {"cuda:0"}


def _best_checkpoint(path: str) -> Any:
    return _fit(path, use_gpu=True).checkpoint


def test_batch_predictor_on_the_gpu_matches_the_cpu(cluster_client: Any, taxi: str) -> None:
    from airflowless.serve import BatchPredictor

    checkpoint = _best_checkpoint(taxi)
    ds = _dataset(taxi).limit(4_000)
    on_gpu = BatchPredictor.from_checkpoint(checkpoint, MLPPredictor, use_gpu=True).predict(
        ds, num_gpus_per_worker=1).to_pandas()
    on_cpu = BatchPredictor.from_checkpoint(checkpoint, MLPPredictor).predict(ds).to_pandas()
    assert set(on_gpu["device"]) == {"cuda:0"} and set(on_cpu["device"]) == {"cpu"}
    assert len(on_gpu) == len(on_cpu) == 4_000
    assert (on_gpu["predictions"] - on_cpu["predictions"]).abs().max() < 1e-4


def test_predictor_deployment_answers_from_the_gpu(cluster_client: Any, taxi: str) -> None:
    import httpx

    from airflowless import serve

    checkpoint = _best_checkpoint(taxi)
    app = serve.PredictorDeployment.options(ray_actor_options={"num_gpus": 1}).bind(
        MLPPredictor, checkpoint, use_gpu=True)
    serve.start(http_options={"port": 0})
    try:
        serve.run(app, name="gpu-predictor", route_prefix="/gpu")
        row = {"passenger_count": 1, "trip_distance": 2.5, "fare_amount": 11.0, "trip_duration": 600,
               "hour": 18, "day_of_week": 2}
        answer = httpx.post(f"{serve.http_address()}/gpu/predict", json=[row, row], timeout=60)
        assert answer.status_code == 200, answer.text
        predictions = answer.json()["predictions"]
        assert [p["device"] for p in predictions] == ["cuda:0", "cuda:0"]
        assert 0.0 <= predictions[0]["predictions"] <= 1.0
    finally:
        serve.shutdown()


def test_torch_predictor_on_the_gpu_matches_the_cpu() -> None:
    import copy

    import numpy as np
    import pandas as pd
    import torch

    from airflowless.train.torch import TorchPredictor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    frame = pd.DataFrame({"x": list(np.random.default_rng(0).normal(size=(64, 3)).astype("float32"))})
    on_cpu = TorchPredictor(copy.deepcopy(model)).predict(frame)
    predictor = TorchPredictor(model, use_gpu=True)  # the module moves to cuda, the rows with it
    assert next(predictor.model.parameters()).is_cuda
    on_gpu = predictor.predict(frame)
    assert np.allclose(np.stack(on_gpu["predictions"]), np.stack(on_cpu["predictions"]), atol=1e-5)
