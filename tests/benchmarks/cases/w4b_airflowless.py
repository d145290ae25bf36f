import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import airflowless  # noqa: E402
from airflowless import tune  # noqa: E402
from w4_common import learning_curve_trainable  # noqa: E402

SCHEDULER = os.environ.get("W4_SCHEDULER", "asha")


def trainable(config):
    learning_curve_trainable(config, tune.report)


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def run():
    samples = int(os.environ.get("W4_SAMPLES", "64"))
    scheduler = (tune.ASHAScheduler(max_t=100, grace_period=1, reduction_factor=3, time_attr="iterations")
                 if SCHEDULER == "asha" else None)
    grid = tune.Tuner(trainable, param_space={
        "lr": tune.loguniform(1e-4, 1), "width": tune.choice([16, 32, 64, 128, 256, 512]),
        "seed": tune.randint(0, 10**6)},
        tune_config=tune.TuneConfig(num_samples=samples, metric="loss", mode="min", scheduler=scheduler, seed=7)).fit()
    best = grid.get_best_result(scope="all")
    iterations = sum(len(r.metrics_history) for r in grid)
    return {"best_loss": min(h["loss"] for h in best.metrics_history), "iterations": iterations}


def teardown():
    airflowless.shutdown()
