"""W3 on a GPU: the TorchTrainer MLP on one GPU rank against plain single-process PyTorch on the same GPU.

Run by tests/gpu/run_on_device.sh: ``python tests/gpu/bench_w3_gpu.py [ROWS]``. Both sides read the same
taxi parquet, build the same features and train the same MLP (2 epochs, 1,024-row batches, Adam 1e-3);
samples/s counts the whole fit, reading included, as a user would run it. Prints one line per side
and the ratio (aim: >= 0.8x).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

EPOCHS, BATCH = 2, 1024


def plain_pytorch(path: str) -> tuple[float, float]:
    """(samples/s, final loss) of one process: pyarrow reads, torch trains on cuda."""
    import pyarrow.dataset as pds
    import torch

    from airflowless.datasets import add_features
    from tests.gpu.models import FEATURES, LABEL, mlp, train_epoch

    started = time.perf_counter()
    table = add_features(pds.dataset(path).to_table())
    columns = {c: table.column(c).to_numpy() for c in [*FEATURES, LABEL]}
    net = mlp().to("cuda")
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss, seen = 0.0, 0
    for _ in range(EPOCHS):
        batches = ({c: v[start:start + BATCH] for c, v in columns.items()} for start in range(0, len(table), BATCH))
        loss, rows = train_epoch(net, opt, batches, "cuda")
        seen += rows
    torch.cuda.synchronize()
    return seen / (time.perf_counter() - started), loss


def airflowless_trainer(path: str) -> tuple[float, float]:
    """(samples/s, final loss) of a TorchTrainer with one GPU rank on the embedded cluster."""
    from airflowless import data
    from airflowless.datasets import add_features
    from airflowless.train import ScalingConfig
    from airflowless.train.torch import TorchTrainer
    from tests.gpu.models import FEATURES, LABEL, train_loop

    started = time.perf_counter()
    ds = data.read_parquet(path).map_batches(add_features, batch_format="pyarrow").select_columns(
        [*FEATURES, LABEL])
    result = TorchTrainer(train_loop, train_loop_config={"epochs": EPOCHS},
                          scaling_config=ScalingConfig(num_workers=1, use_gpu=True), datasets={"train": ds}).fit()
    assert result.error is None, result.error
    assert result.metrics["device"] == "cuda:0", result.metrics
    rows = ds.count()
    return rows * EPOCHS / (time.perf_counter() - started), result.metrics["loss"]


def main(rows: int) -> None:
    import airflowless
    from airflowless.datasets import make_taxi

    folder = tempfile.mkdtemp(prefix="w3-gpu-")
    path = f"{folder}/taxi"
    make_taxi(rows, n_files=8, path=path, seed=0)
    os.environ.setdefault("AIRFLOWLESS_HOME", f"{folder}/home")
    plain_pytorch(path)  # warm: CUDA context, kernels, page cache
    plain_rate, plain_loss = plain_pytorch(path)
    airflowless.init(quiet=True, dashboard_address=None)
    airflowless_trainer(path)  # warm: the workers' imports and CUDA contexts
    ours_rate, ours_loss = airflowless_trainer(path)
    airflowless.shutdown()
    print(f"W3-GPU plain PyTorch   {plain_rate / 1e3:8.0f} k samples/s  loss {plain_loss:.4f}  ({rows} rows)")
    print(f"W3-GPU airflowless     {ours_rate / 1e3:8.0f} k samples/s  loss {ours_loss:.4f}")
    print(f"W3-GPU ratio {ours_rate / plain_rate:.2f}x plain PyTorch on the same GPU (aim >= 0.8x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400_000)
