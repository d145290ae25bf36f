import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w4_common import curve, drawn_points, summary  # noqa: E402


def setup():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def run():
    import time

    import optuna

    histories = []

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-4, 1, log=True)
        width = trial.suggest_categorical("width", [16, 32, 64, 128, 256, 512])
        seed = trial.suggest_int("seed", 0, 10**6)
        history = []
        histories.append(history)
        for it in range(100):
            time.sleep(0.001)
            loss = curve(lr, width, it, seed)
            history.append(loss)
            trial.report(loss, it + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return min(history)

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7),
                                pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3))
    points = drawn_points()
    for point in points:
        study.enqueue_trial(point)
    study.optimize(objective, n_trials=len(points))
    return summary(histories)
