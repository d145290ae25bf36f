"""W6's tune as plain XGBoost can do it at best: 2 processes joined by XGBoost's collective, each
with its half of the rows prepared and binned once, the 8 configs trained one after another. No
cluster, no records, no checkpoints: what the tune phase of any system doing this work can approach."""

import multiprocessing
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import pyarrow.parquet as pq  # noqa: E402
from w6_common import FEATURES, LABEL, PATH, SAMPLES, SCALED, Phases, feature_step, floor_rank  # noqa: E402


def setup():
    pass


def run():
    from xgboost.tracker import RabitTracker

    phases = Phases()
    frame = feature_step(pq.read_table(PATH)).to_pandas()
    train, valid = frame[~frame["_valid"]].copy(), frame[frame["_valid"]].copy()
    low, high = train[SCALED].min(), train[SCALED].max()
    for part in (train, valid):
        part[SCALED] = (part[SCALED] - low) / (high - low)
    halves = [tuple((part[FEATURES].iloc[r::2].reset_index(drop=True), part[LABEL].iloc[r::2].to_numpy())
                    for part in (train, valid)) for r in range(2)]
    phases.done("data")
    tracker = RabitTracker(host_ip="127.0.0.1", n_workers=2)
    tracker.start()
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    ranks = [spawn.Process(target=floor_rank, args=(r, tracker.worker_args(), halves[r], out)) for r in range(2)]
    for process in ranks:
        process.start()
    trials = [out.get(timeout=600) for _ in range(SAMPLES)]
    for process in ranks:
        process.join(60)
    tracker.free()
    return {"data_s": phases.seconds["data_s"], "tune_s": sum(seconds for seconds, _ in trials),
            "best_valid_logloss": min(logloss for _, logloss in trials)}
