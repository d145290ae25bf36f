import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w3_common import BATCH, EPOCHS, FEATURES, LABEL, PATH, model, standardize  # noqa: E402

from airflowless.datasets import add_features  # noqa: E402


def setup():
    pass


def run(threads=2):
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    torch.set_num_threads(threads)
    table = add_features(pq.read_table(PATH)).to_pandas()
    x_all = torch.from_numpy(standardize(table[FEATURES].to_numpy(np.float32)))
    y_all = torch.from_numpy(table[LABEL].to_numpy(np.float32)).unsqueeze(1)
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    seen, total = 0, 0.0
    for _ in range(EPOCHS):
        total = 0.0
        for start in range(0, len(y_all), BATCH):
            x, y = x_all[start:start + BATCH], y_all[start:start + BATCH]
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            total += float(loss) * len(y)
            seen += len(y)
    return {"samples": seen, "loss": total / len(y_all)}
