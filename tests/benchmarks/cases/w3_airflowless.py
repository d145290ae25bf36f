import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import airflowless  # noqa: E402
from airflowless import data  # noqa: E402
from airflowless.datasets import add_features  # noqa: E402
from airflowless.train import ScalingConfig  # noqa: E402
from airflowless.train.torch import TorchTrainer  # noqa: E402
from w3_common import BATCH, EPOCHS, FEATURES, LABEL, PATH  # noqa: E402


def loop(config):
    import sys

    import numpy as np
    import torch

    sys.path.insert(0, config["here"])
    from w3_common import model, standardize

    from airflowless import train
    from airflowless.train.torch import prepare_model

    net = prepare_model(model())
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    shard = train.get_dataset_shard("train")
    seen = 0
    for epoch in range(EPOCHS):
        total = 0.0
        for batch in shard.iter_batches(batch_size=BATCH, batch_format="numpy"):
            x = torch.from_numpy(standardize(np.stack([batch[c].astype(np.float32) for c in FEATURES], axis=1)))
            y = torch.from_numpy(batch[LABEL].astype(np.float32)).unsqueeze(1)
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            total += float(loss) * len(y)
            seen += len(y)
        train.report({"epoch": epoch, "loss": total / max(1, shard.count()), "samples": seen})


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def run():
    ds = data.read_parquet(PATH).map_batches(add_features, batch_format="pyarrow").select_columns([*FEATURES, LABEL])
    trainer = TorchTrainer(loop, train_loop_config={"here": os.path.dirname(__file__)},
                           scaling_config=ScalingConfig(num_workers=2), datasets={"train": ds})
    result = trainer.fit()
    assert result.error is None, result.error
    phases = {f"{phase}_s": trainer.last_fit_seconds.get(phase, 0.0)
              for phase in ("data", "rank0_rendezvous", "rank0_training")}
    return {"samples": result.metrics["samples"] * 2, "loss": result.metrics["loss"], **phases}


def teardown():
    airflowless.shutdown()
