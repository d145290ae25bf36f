"""Ray Train quick starts: XGBoostTrainer on two ranks, and a TorchTrainer loop with report/get_dataset_shard."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import pandas as pd
import pytest

# Ray: from ray import data, train
from airflowless import data, train

# Ray: from ray.train import Checkpoint, ScalingConfig
from airflowless.train import Checkpoint, ScalingConfig

# Ray: from ray.train.torch import TorchTrainer, prepare_model
from airflowless.train.torch import TorchTrainer, prepare_model

# Ray: from ray.train.xgboost import XGBoostTrainer
from airflowless.train.xgboost import XGBoostTrainer

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def breast_cancer_like(n: int = 2_000) -> pd.DataFrame:
    """Two informative features and one noise feature; a linear boundary."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3))
    target = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.3, size=n) > 0.4).astype(int)
    return pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "noise": x[:, 2], "target": target})


def test_xgboost_quickstart() -> None:
    frame = breast_cancer_like()
    majority = max(frame["target"].mean(), 1 - frame["target"].mean())

    # ---- the program, as in Ray's docs ----
    dataset = data.from_pandas(frame)
    train_dataset, valid_dataset = dataset.train_test_split(test_size=0.3)
    trainer = XGBoostTrainer(
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        label_column="target",
        num_boost_round=20,
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        datasets={"train": train_dataset, "valid": valid_dataset},
    )
    result = trainer.fit()
    # ----------------------------------------

    assert result.error is None and result.checkpoint is not None
    assert 1 - result.metrics["valid-error"] > majority + 0.1  # better than always guessing the majority
    assert result.metrics["valid-logloss"] < result.metrics_dataframe["valid-logloss"].iloc[0]


def train_func(config: dict[str, Any]) -> None:
    import torch

    torch.manual_seed(0)  # the test's threshold holds for this start; Ray's quickstart leaves it random
    model = prepare_model(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    shard = train.get_dataset_shard("train")
    for epoch in range(config["epochs"]):
        total, seen = 0.0, 0
        for batch in shard.iter_torch_batches(batch_size=64, dtypes=torch.float32):
            x = torch.stack([batch["x1"], batch["x2"]], dim=1)
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, seen = total + float(loss) * len(x), seen + len(x)
        with tempfile.TemporaryDirectory() as folder:
            torch.save(getattr(model, "module", model).state_dict(), os.path.join(folder, "model.pt"))
            train.report({"epoch": epoch, "loss": total / seen, "rank": train.get_context().get_world_rank()},
                         checkpoint=Checkpoint.from_directory(folder))


def test_torch_quickstart() -> None:
    import torch

    rng = np.random.default_rng(0)
    x = rng.normal(size=(1_000, 2))
    frame = pd.DataFrame({"x1": x[:, 0], "x2": x[:, 1], "y": 3 * x[:, 0] - 2 * x[:, 1] + 1})

    # ---- the program, as in Ray's docs ----
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"lr": 0.05, "epochs": 4},
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": data.from_pandas(frame)},
    )
    result = trainer.fit()
    # ----------------------------------------

    assert result.error is None
    losses = list(result.metrics_dataframe["loss"])
    assert len(losses) == 4 and losses[-1] < 0.05 < losses[0]
    model = torch.nn.Linear(2, 1)
    with result.checkpoint.as_directory() as folder:  # type: ignore[union-attr]
        model.load_state_dict(torch.load(os.path.join(folder, "model.pt")))
    assert model.weight.detach().numpy().ravel() == pytest.approx([3.0, -2.0], abs=0.2)
