"""Ray Tune quick start: a function trainable reporting each step, ASHA, get_best_result."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

# Ray: from ray import train, tune
from airflowless import train, tune

# Ray: from ray.tune.schedulers import ASHAScheduler
from airflowless.tune.schedulers import ASHAScheduler

pytestmark = pytest.mark.usefixtures("cluster_client", "home")


def objective(config: dict[str, Any]) -> None:
    """Gradient descent on a 1-D quadratic; a good lr converges, a bad one does not."""
    x = 10.0
    for step in range(20):
        x -= config["lr"] * 2 * (x - config["target"])
        if step % 2:
            tune.report({"loss": (x - config["target"]) ** 2})  # the Tune spelling
        else:
            train.report({"loss": (x - config["target"]) ** 2})  # the Train spelling works in Tune too


def test_tune_quickstart() -> None:
    # ---- the program, as in Ray's docs ----
    search_space = {"lr": tune.loguniform(1e-3, 0.5), "target": 3.0}
    tuner = tune.Tuner(
        objective,
        param_space=search_space,
        tune_config=tune.TuneConfig(num_samples=12, metric="loss", mode="min", seed=1,
                                    scheduler=ASHAScheduler(max_t=20, grace_period=2, reduction_factor=2)),
        run_config=tune.RunConfig(name="compat_tune_quickstart"),
    )
    results = tuner.fit()
    best = results.get_best_result()
    frame = results.get_dataframe()
    # ----------------------------------------

    assert len(results) == 12 and results.num_errors == 0 and len(frame) == 12
    lrs = [r.config["lr"] for r in results]
    assert best.config["lr"] == pytest.approx(max(lrs), rel=0.5) or best.metrics["loss"] < 1e-3
    assert best.metrics["loss"] == pytest.approx(float(np.nanmin(frame["loss"])))
    assert sum(len(r.metrics_history) < 20 for r in results) >= 3  # ASHA stopped the slow learners early
