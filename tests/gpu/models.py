"""What the GPU tests train, serve and score (importable by workers: pickled by reference)."""

from __future__ import annotations

import os
from typing import Any

FEATURES = ["passenger_count", "trip_distance", "fare_amount", "trip_duration", "hour", "day_of_week"]
LABEL = "is_big_tip"
SCALE = [2.0, 5.0, 20.0, 1000.0, 12.0, 3.0]  # fixed, so CPU and GPU runs see the same inputs


def mlp() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 1))


def features(columns: dict[str, Any]) -> Any:
    import numpy as np

    return np.stack([np.asarray(columns[c], dtype=np.float32) / s for c, s in zip(FEATURES, SCALE, strict=True)],
                    axis=1)


def train_epoch(net: Any, opt: Any, batches: Any, device: Any) -> tuple[float, int]:
    """One epoch of the W3 MLP over ``batches`` (dicts of columns) on ``device``: (mean loss, rows)."""
    import numpy as np
    import torch

    loss_fn = torch.nn.BCEWithLogitsLoss()
    total, rows = 0.0, 0
    for batch in batches:
        x = torch.from_numpy(features(batch)).to(device)
        y = torch.from_numpy(np.asarray(batch[LABEL], dtype=np.float32)).unsqueeze(1).to(device)
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        total += float(loss) * len(y)
        rows += len(y)
    return total / max(1, rows), rows


def train_loop(config: dict[str, Any]) -> None:
    """The W3 MLP, 2 epochs of 1,024-row batches, on this rank's device; saves a checkpoint."""
    import tempfile

    import torch

    from airflowless import train
    from airflowless.train import Checkpoint
    from airflowless.train.torch import get_device, prepare_model

    device = get_device()
    net = prepare_model(mlp())
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    shard = train.get_dataset_shard("train")
    for epoch in range(config.get("epochs", 2)):
        loss, rows = train_epoch(net, opt, shard.iter_batches(batch_size=1024, batch_format="numpy"), device)
        with tempfile.TemporaryDirectory() as folder:
            torch.save(getattr(net, "module", net).state_dict(), os.path.join(folder, "model.pt"))
            train.report({"epoch": epoch, "loss": loss, "rows": rows,
                          "device": str(next(net.parameters()).device),
                          "cuda_bytes": torch.cuda.memory_allocated() if device.type == "cuda" else 0},
                         checkpoint=Checkpoint.from_directory(folder))


class MLPPredictor:
    """A custom predictor (Ray's form): the MLP from a checkpoint, on the GPU when asked."""

    def __init__(self, model: Any, device: str) -> None:
        self.model, self.device = model, device

    @classmethod
    def from_checkpoint(cls, checkpoint: Any, use_gpu: bool = False) -> MLPPredictor:
        import torch

        device = "cuda:0" if use_gpu else "cpu"
        model = mlp()
        with checkpoint.as_directory() as folder:
            model.load_state_dict(torch.load(os.path.join(folder, "model.pt"), map_location=device))
        return cls(model.to(device).eval(), device)

    def predict(self, frame: Any) -> Any:
        import pandas as pd
        import torch

        x = torch.from_numpy(features({c: frame[c].to_numpy() for c in FEATURES})).to(self.device)
        with torch.no_grad():
            scores = torch.sigmoid(self.model(x)).squeeze(1)
        return pd.DataFrame({"predictions": scores.cpu().numpy(), "device": str(scores.device)})


class OnDevice:
    """A map_batches class: a model built once per worker, on the GPU, scoring each batch there."""

    def __init__(self) -> None:

        self.model = mlp().to("cuda")

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np
        import torch

        x = torch.from_numpy(features(batch)).to("cuda")
        with torch.no_grad():
            out = self.model(x)
        batch["score"] = out.squeeze(1).cpu().numpy()
        batch["device"] = np.array([str(out.device)] * len(out))
        return batch


def gpu_trial(config: dict[str, Any]) -> None:
    """A Tune trial holding a quarter of the GPU: a few seconds of matrix products, with when it ran."""
    import time

    import torch

    from airflowless import train

    start = time.time()
    a = torch.randn(2048, 2048, device="cuda")
    deadline = start + config["seconds"]
    steps = 0
    while time.time() < deadline:
        a = torch.tanh(a @ a / 2048)
        steps += 1
    torch.cuda.synchronize()
    train.report({"start": start, "end": time.time(), "steps": steps, "device": str(a.device),
                  "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "")})
