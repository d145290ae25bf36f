import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import airflowless  # noqa: E402
from airflowless import tune  # noqa: E402
from w4_common import drawn_points, learning_curve_trainable, summary  # noqa: E402

SCHEDULER = os.environ.get("W4_SCHEDULER", "asha")  # asha (Ray's stopping rule) | asha-promotion | fifo


def trainable(config):
    learning_curve_trainable(config, tune.report)


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def run():
    scheduler = None
    if SCHEDULER.startswith("asha"):
        scheduler = tune.ASHAScheduler(max_t=100, grace_period=1, reduction_factor=3, time_attr="iterations",
                                       promotion=SCHEDULER == "asha-promotion")
    grid = tune.Tuner(trainable, param_space={"point": tune.grid_search(drawn_points())},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler)).fit()
    return summary([[h["loss"] for h in r.metrics_history] for r in grid])


def teardown():
    airflowless.shutdown()
