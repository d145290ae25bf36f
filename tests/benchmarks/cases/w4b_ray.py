"""Ray Tune's ASHAScheduler on the same drawn points (run with an interpreter that has ray)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from w4_common import drawn_points, summary  # noqa: E402


def setup():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"working_dir": HERE, "excludes": ["*.pyc"]})


def trainable(config):
    from ray import tune
    from w4_common import learning_curve_trainable

    learning_curve_trainable(config, tune.report)


def run():
    from ray import tune

    scheduler = tune.schedulers.ASHAScheduler(max_t=100, grace_period=1, reduction_factor=3,
                                              time_attr="iterations")
    grid = tune.Tuner(trainable, param_space={"point": tune.grid_search(drawn_points())},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler)).fit()
    return summary([list(r.metrics_dataframe["loss"]) for r in grid])


def teardown():
    import ray

    ray.shutdown()
