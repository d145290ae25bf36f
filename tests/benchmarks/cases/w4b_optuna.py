import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w4_common import curve  # noqa: E402


def setup():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def run():
    import time

    import optuna

    spent = [0]

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-4, 1, log=True)
        width = trial.suggest_categorical("width", [16, 32, 64, 128, 256, 512])
        seed = trial.suggest_int("seed", 0, 10**6)
        best = float("inf")
        for it in range(100):
            time.sleep(0.001)
            loss = curve(lr, width, it, seed)
            spent[0] += 1
            best = min(best, loss)
            trial.report(loss, it + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return best

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7),
                                pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3))
    study.optimize(objective, n_trials=64)
    values = [min(t.intermediate_values.values()) for t in study.trials if t.intermediate_values]
    return {"best_loss": min(values), "iterations": spent[0]}
