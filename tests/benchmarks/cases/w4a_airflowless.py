import airflowless
from airflowless import tune


def noop(config):
    for it in range(10):
        tune.report({"it": it})


def setup():
    airflowless.init(quiet=True, dashboard_address=None)


def run():
    grid = tune.Tuner(noop, param_space={"x": tune.uniform(0, 1)}, tune_config=tune.TuneConfig(num_samples=200)).fit()
    assert grid.num_terminated == 200
    return {"trials": 200}


def teardown():
    airflowless.shutdown()
