"""W3: MLP 6-64-64-1 on taxi-M features, 2 epochs, batch 1024, Adam 1e-3."""

import os

PATH = os.environ["TAXI_PATH"]
FEATURES = ["passenger_count", "trip_distance", "fare_amount", "trip_duration", "hour", "day_of_week"]
LABEL = "is_big_tip"
EPOCHS, BATCH = 2, 1024


def model():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 1))


def standardize(x):
    # fixed scales so every system sees the same inputs (no fitting step in the timing)
    import numpy as np

    scale = np.array([2.0, 5.0, 20.0, 1000.0, 12.0, 3.0], dtype=np.float32)
    return (x / scale).astype(np.float32)
