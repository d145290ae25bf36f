"""W4a (200 no-work trials x 10 reports) with the dashboard on, and with PAGES=open the experiments
page, then the running experiment's page (trial table and learning curves), open in Chromium."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import airflowless  # noqa: E402
from airflowless import tune  # noqa: E402
from pages_common import OpenExperimentPage, Pages, measured  # noqa: E402

SAMPLES = int(os.environ.get("PAGES_W4A_SAMPLES", "200"))
pages = None


def noop(config):
    for it in range(10):
        tune.report({"it": it})


def setup():
    global pages
    pages = Pages(airflowless.init(quiet=True, dashboard_address=":0"))
    pages.show("experiments")


def fit():
    grid = tune.Tuner(noop, param_space={"x": tune.uniform(0, 1)}, tune_config=tune.TuneConfig(num_samples=SAMPLES),
                      run_config=tune.RunConfig(callbacks=[OpenExperimentPage()])).fit()
    assert grid.num_terminated == SAMPLES
    return {"trials": SAMPLES}


def run():
    figures = measured(pages, fit)
    drawn = f"document.querySelectorAll('table.trials tbody tr').length === {SAMPLES}"
    figures["page"] = pages.check(f"{drawn} && document.querySelectorAll('path.curve').length === {SAMPLES}")
    return figures


def teardown():
    pages.close()
    airflowless.shutdown()
