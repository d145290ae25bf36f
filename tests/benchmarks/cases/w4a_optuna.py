def setup():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def run():
    import optuna

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        for it in range(10):
            trial.report(x, it)
        return x

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=200)
    return {"trials": 200}
