"""Every airflowless page in headless Chromium, on the embedded cluster, while real work runs.

A pipeline whose last stage waits on a Dask ``Event`` (so the run page is seen
live, then finished), a Tune search with one trial held mid-way (curves while it
runs, then the best highlighted), and a served application with two replicas.
Each page is loaded by Chromium, its scripts run, and the DOM they built is read
back: stage names and states, trial ids, SVG curve paths, replica rows. A PNG of
each page goes to the test artifacts folder (``$AIRFLOWLESS_TEST_ARTIFACTS``,
default ``<tmp>/airflowless-test-artifacts``); with
``AIRFLOWLESS_UPDATE_DOC_SCREENSHOTS=1`` they also replace ``docs/img/pages-*.png``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Event

from airflowless import pipeline, serve, stage, tune
from airflowless.store import open_store
from airflowless.train import Checkpoint, RunConfig
from tests.support.eventually import eventually
from tests.support.pages import Browser, chromium, fetch
from tests.support.processes import stop

# generous: the first test also starts the embedded cluster and Chromium, on a machine others share
pytestmark = pytest.mark.timeout(240)

ARTIFACTS = Path(os.environ.get("AIRFLOWLESS_TEST_ARTIFACTS",
                                Path(tempfile.gettempdir()) / "airflowless-test-artifacts")) / "screenshots"
DOC_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module (Debian's package; CI installs it)."""
    if chromium() is None:
        from tests.conftest import require_service

        require_service("chromium", "the chromium binary is not installed (apt-get install -y chromium)")
    with Browser() as instance:
        yield instance


@pytest.fixture(scope="module")
def page_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private AIRFLOWLESS_HOME (its SQLite record is what the pages show) for this module."""
    home = tmp_path_factory.mktemp("pages-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOWLESS_HOME", str(home))
        for name in ("AIRFLOWLESS_DB", "AIRFLOWLESS_STORAGE"):
            patch.delenv(name, raising=False)
        yield home


@pytest.fixture(scope="module")
def dashboard(cluster_client: Any, page_home: Path) -> str:
    """The embedded cluster's dashboard base URL (``.../``), where ``airflowless.init`` put the pages."""
    return str(cluster_client.dashboard_link).rsplit("/", 1)[0] + "/"


DRAWN = "/^updated/.test(document.getElementById('status').textContent)"  # the page's script drew once


def show(browser: Browser, dashboard: str, path: str, shot: str | None, *, until: str = DRAWN) -> str:
    """The DOM of ``path`` once ``until`` holds in it; a screenshot named ``shot`` in the artifacts."""
    target = ARTIFACTS / f"pages-{shot}.png" if shot else None
    dom = browser.show(dashboard + path, until=f"({DRAWN}) && ({until})", screenshot=target)
    assert 'class="af-status af-error"' not in dom, re.search(r'id="status">([^<]*)<', dom)
    if target is not None and os.environ.get("AIRFLOWLESS_UPDATE_DOC_SCREENSHOTS") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(target, DOC_IMAGES / target.name)
    return dom


def count(selector: str) -> str:
    return f"document.querySelectorAll({selector!r}).length"


# -- a pipeline with a fan-out, its last stage held by an Event -------------------------------

@stage
def load(n: int) -> list[int]:
    return list(range(n))


@stage
def double(xs: list[int]) -> list[int]:
    return [2 * x for x in xs]


@stage
def square(xs: list[int]) -> list[int]:
    return [x * x for x in xs]


@stage
def combine(ys: list[int], zs: list[int], gate: str) -> int:
    print(f"waiting for {gate}")
    if not Event(gate).wait(120):
        raise TimeoutError(f"the test never released {gate}")
    print("released: combining")
    return sum(ys) + sum(zs)


@pipeline
def pages_demo(n: int = 10, gate: str = "") -> int:
    xs = load(n)
    return combine(double(xs), square(xs), gate)


def _enter_token(browser: Browser, cluster_client: Any) -> None:
    """Type the cluster's token into the page's token field (actions and logs need it)."""
    import json

    from airflowless.control import mount

    ctx = mount.installed(cluster_client.cluster.scheduler)
    assert ctx is not None and ctx.token
    browser.evaluate(f"{{ const t = document.getElementById('af-token'); t.value = {json.dumps(ctx.token)}; "
                     "t.dispatchEvent(new Event('change')) }")


def _stage_status(store: Any, run_id: int, node: str) -> str | None:
    return next((s.status for s in store.get_run(run_id).stages if s.node == node), None)


def _stage_states(dom: str) -> dict[str, str]:
    return dict(re.findall(r'<g class="stage" data-node="([^"]+)" data-status="([^"]+)"', dom))


def test_run_pages_live_then_finished(browser: Browser, dashboard: str, cluster_client: Any) -> None:
    gate = f"pages-gate-{uuid.uuid4().hex[:8]}"
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.setdefault("result", pages_demo(gate=gate)), daemon=True)
    thread.start()
    try:
        store = open_store()
        run = eventually(lambda: next((r for r in store.list_runs(limit=5) if r.params.get("gate") == gate), None))
        eventually(lambda: _stage_status(store, run.id, "combine") == "running")
        dom = show(browser, dashboard, f"airflowless/runs/{run.id}", "run-live",
                   until=f"{count('g.stage')} === 4 && !!document.querySelector('g[data-node=combine][data-status=running]')")
        states = _stage_states(dom)
        assert set(states) == {"load", "double", "square", "combine"}, states
        assert states["combine"] == "running" and states["load"] == "succeeded"
        assert dom.count('<path class="edge"') == 4  # load->double, load->square, double->combine, square->combine
        assert "· live" in dom
        # the running stage's log, followed: what it printed so far, then what it prints once released
        _enter_token(browser, cluster_client)  # logs are the cluster owner's
        browser.evaluate("document.querySelector('button[data-log=combine]').click()")
        log = "(document.querySelector('pre.af-log[data-node=combine]') || {}).textContent || ''"
        eventually(lambda: f"waiting for {gate}" in browser.evaluate(log), timeout=30,
                   message=lambda: browser.evaluate(log))
        assert "following" in browser.evaluate("document.getElementById('log').parentNode.textContent")
    finally:
        Event(gate).set()
        thread.join(120)
    eventually(lambda: "released: combining" in browser.evaluate(log), timeout=30, message=lambda: browser.evaluate(log))
    assert done["result"].value == sum(2 * x for x in range(10)) + sum(x * x for x in range(10))
    dom = show(browser, dashboard, f"airflowless/runs/{run.id}", "run",
               until=f"{count('g.stage[data-status=succeeded]')} === 4")
    assert set(_stage_states(dom).values()) == {"succeeded"}
    assert re.search(r'<table class="af stages">.*<td>combine</td>', dom, re.S)
    dom = show(browser, dashboard, "airflowless/runs", "runs", until=count("table.runs tbody tr"))
    assert f'href="/airflowless/runs/{run.id}"' in dom and "pages_demo" in dom
    assert f"<td>n=10, gate={gate}</td>" in dom  # the params column

    # the runs page filters by pipeline and status, and compares two ticked runs
    opened = f"pages-gate-{uuid.uuid4().hex[:8]}"
    Event(opened).set()
    other = pages_demo(n=3, gate=opened).run_id
    show(browser, dashboard, "airflowless/runs", None, until=count(f"input.af-pick[data-run='{other}']"))
    browser.evaluate("(() => { const s = document.getElementById('filter-pipeline'); s.value = 'pages_demo';"
                     " s.dispatchEvent(new Event('change')); })()")
    shown = browser.evaluate("[...document.querySelectorAll('table.runs tbody tr td:nth-child(3)')].map(td => td.textContent)")
    assert shown and set(shown) == {"pages_demo"}, shown
    for ticked in (run.id, other):
        browser.evaluate(f"document.querySelector(\"input.af-pick[data-run='{ticked}']\").click()")
    compared = eventually(lambda: browser.evaluate(
        "(document.querySelector('#compare table.compare') || {}).outerHTML || null"))
    assert re.search(r'<tr class="differs"><td>n</td><td>10</td><td>3</td></tr>', compared), compared
    assert re.search(r"<tr><td>status</td><td>succeeded</td><td>succeeded</td></tr>", compared), compared
    assert "<td>stage combine</td>" in compared


# -- a mapped stage: one node for its items ---------------------------------------------------

@stage
def days(n: int) -> list[int]:
    return list(range(n))


@stage
def score_day(day: int) -> int:
    print(f"scoring day {day}")
    return 10 * day


@stage
def total_scores(scores: list[int]) -> int:
    return sum(scores)


@pipeline
def mapped_demo(n: int = 30) -> int:
    return total_scores(score_day.map(days(n)))


def test_a_mapped_stage_is_one_node_saying_how_its_items_went(browser: Browser, dashboard: str,
                                                              cluster_client: Any) -> None:
    result = mapped_demo(n=30)
    assert result.value == sum(10 * day for day in range(30))
    dom = show(browser, dashboard, f"airflowless/runs/{result.run_id}", "run-mapped",
               until=count("g.stage[data-items]"))
    assert _stage_states(dom) == {"days": "succeeded", "score_day": "succeeded", "total_scores": "succeeded"}
    assert 'data-items="30" data-counts="30 succeeded"' in dom
    assert dom.count('<path class="edge"') == 2  # days -> score_day (its items read days) -> total_scores
    assert dom.count("<td>score_day[") == 30  # the table still lists each item
    _enter_token(browser, cluster_client)
    browser.evaluate("document.querySelector('button[data-log=\"score_day[7]\"]').click()")
    log = "(document.querySelector('pre.af-log') || {}).textContent || ''"
    eventually(lambda: browser.evaluate(log).strip() == "scoring day 7",  # that item's own output
               message=lambda: browser.evaluate(log))


# -- a Tune search: one trial held after two reports ------------------------------------------

def curve(config: dict[str, Any]) -> None:
    for step in range(1, 6):
        if step == 3 and config["x"] == 2:
            Event(config["gate"]).wait(120)
        metrics = {"loss": config["x"] / step + 0.1 * config["x"], "score": step * config["x"]}
        if step == 5:  # a checkpoint at the end, for the trial page
            folder = tempfile.mkdtemp(prefix="pages-checkpoint-")  # the report may read it after it returns
            Path(folder, "state.txt").write_text(str(step))
            tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)


def test_experiment_pages_curves_live_then_best(browser: Browser, dashboard: str) -> None:
    gate = f"pages-tune-{uuid.uuid4().hex[:8]}"
    name = f"pages-search-{uuid.uuid4().hex[:6]}"
    done: dict[str, Any] = {}
    tuner = tune.Tuner(curve, param_space={"x": tune.grid_search([1, 2, 3]), "gate": gate},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
                       run_config=RunConfig(name=name))
    thread = threading.Thread(target=lambda: done.setdefault("grid", tuner.fit()), daemon=True)
    thread.start()
    try:
        store = open_store()
        experiment = eventually(lambda: store.find_experiment(name))
        held = eventually(lambda: next((t for t in store.list_trials(experiment["id"])
                                        if t["config"].get("x") == 2 and len(store.trial_metrics(t["id"])) >= 2), None))
        dom = show(browser, dashboard, f"airflowless/experiments/{experiment['id']}", "experiment-live",
                   until=f"{count('path.curve')} >= 1 && {count('table.trials tbody tr')} >= 2")
        assert re.search(rf'href="/airflowless/trials/{held["id"]}"', dom)
        assert 'data-series="' in dom and dom.count('<path class="curve') >= 1
        assert "running" in dom and "· live" in dom
    finally:
        Event(gate).set()
        thread.join(150)
    grid = done["grid"]
    assert grid.num_errors == 0
    trials = store.list_trials(experiment["id"])
    assert len(trials) == 3
    dom = show(browser, dashboard, f"airflowless/experiments/{experiment['id']}", "experiment",
               until=f"{count('path.curve')} === 3 && {count('path.curve.best')} === 1 && {count('.s-running')} === 0")
    for trial in trials:
        assert f'href="/airflowless/trials/{trial["id"]}"' in dom
        assert f'data-series="{trial["name"]}"' in dom
    assert len(re.findall(r'<path class="curve[^"]*"[^>]*data-series=', dom)) == 3
    best = min(trials, key=lambda t: t["last_metrics"]["loss"])  # x=1
    assert re.search(rf'<path class="curve best"[^>]*data-series="{re.escape(best["name"])}"', dom)
    assert '<tr class="best">' in dom and "★ best" in dom
    assert '<select id="metric">' in dom and '<option value="score">' in dom
    # the curves of all trials come in one request per refresh, never one per trial
    asked = browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert any(f"/api/v1/experiments/{experiment['id']}/metrics" in url for url in asked), asked
    assert not [url for url in asked if re.search(r"/api/v1/trials/\d+/metrics", url)], asked
    # the table sorts by a clicked column; the selector redraws the curves for another metric
    browser.evaluate("[...document.querySelectorAll('table.trials th')].find(th => th.textContent === 'loss').click()")
    assert browser.evaluate("document.querySelector('table.trials tbody tr a').textContent") == best["name"]
    browser.evaluate("const s = document.getElementById('metric'); s.value = 'score'; s.dispatchEvent(new Event('change'))")
    assert browser.evaluate("document.querySelector('svg.af-chart text.ylabel').textContent") == "score"
    assert browser.evaluate(count("path.curve")) == 3
    dom = show(browser, dashboard, f"airflowless/trials/{best['id']}", "trial",
               until=f"{count('path.curve')} >= 2 && {count('table.checkpoints tbody tr')} === 1")
    assert dom.count('<path class="curve') >= 2  # loss and score
    assert re.search(r'<table class="af reports">.*<td class="num">5</td>', dom, re.S)
    assert re.search(r'<table class="af checkpoints">.*<td class="num">5</td>.*loss=0.3', dom, re.S)
    dom = show(browser, dashboard, "airflowless/experiments", "experiments", until=count("table.experiments tbody tr"))
    assert name in dom and "3 completed" in dom


# -- the experiment page redraws only what moved ---------------------------------------------

WATCH = """(() => {
  performance.setResourceTimingBufferSize(100000);
  window.afMutations = [];
  window.afRefreshed = 0;  // the status line is rewritten once each refresh has finished drawing
  new MutationObserver(() => { window.afRefreshed += 1; })
    .observe(document.getElementById('status'), {childList: true, characterData: true, subtree: true});
  new MutationObserver((records) => { window.afMutations.push(...records); })
    .observe(document.getElementById('content'), {subtree: true, childList: true, attributes: true, characterData: true});
  return true;
})()"""

# where each DOM change since WATCH happened: "row <trial or stage>", "curve <trial>", "stage graph"
# or the element's tag and class
TOUCHED = """[...new Set(window.afMutations.map((m) => {
  const node = m.target.nodeType === 1 ? m.target : m.target.parentElement;
  const row = node.closest('table.trials tbody tr');
  if (row) return 'row ' + row.querySelector('a').textContent;
  const stage = node.closest('table.stages tbody tr');
  if (stage) return 'row ' + stage.querySelector('td').textContent;
  if (node.closest('svg.af-graph') || node.matches('#graph .body')) return 'stage graph';
  const path = node.closest('path.curve');
  if (path) return 'curve ' + path.dataset.series;
  return node.tagName.toLowerCase() + '.' + (node.getAttribute('class') || '') + ' ' + m.type + ' ' + (m.attributeName || '');
}))].sort()"""


def _refreshes(browser: Browser) -> int:
    """How many refreshes of the page have finished since WATCH."""
    return int(browser.evaluate("window.afRefreshed"))


def test_experiment_page_redraws_only_what_changed(browser: Browser, dashboard: str) -> None:
    """A refresh where nothing moved changes nothing in the page; one where a trial reported
    touches that trial's row and curve only (the record's axes range stays the same)."""
    store = open_store()
    experiment_id = store.create_experiment(f"pages-quiet-{uuid.uuid4().hex[:6]}", kind="tune", config={},
                                            metric="loss", mode="min")
    trial_ids = []
    for i in range(4):
        trial_id = store.add_trial(experiment_id, f"quiet_{i}", config={"x": i}, status="running")
        steps = 2 if i == 2 else 5
        for step in range(1, steps + 1):
            store.add_metrics(trial_id, step, {"loss": (i + 1) / step, "training_iteration": step})
        store.update_trial(trial_id, iterations=steps, last_metrics={"loss": (i + 1) / steps})
        trial_ids.append(trial_id)
    path = f"airflowless/experiments/{experiment_id}"
    show(browser, dashboard, path, None, until=f"{count('path.curve')} === 4 && {count('path.curve.best')} === 1")
    answered = browser.evaluate("AF.fetches.notModified")
    assert browser.evaluate(WATCH)
    eventually(lambda: _refreshes(browser) >= 1, timeout=30, interval=0.1)
    # the unchanged experiment came back as a 304 (If-None-Match with the last ETag), no body downloaded
    eventually(lambda: browser.evaluate("AF.fetches.notModified") > answered, timeout=30, interval=0.1)
    assert browser.evaluate(TOUCHED) == []  # a refresh, nothing new in the record: no DOM change at all

    held = trial_ids[2]  # a third report inside the range drawn (x 1..5, loss 0.2..4), not the best
    store.add_metrics(held, 3, {"loss": 1.0, "training_iteration": 3})
    store.update_trial(held, iterations=3, last_metrics={"loss": 1.0})
    eventually(lambda: browser.evaluate(
        "(document.querySelector('path.curve[data-series=quiet_2]').getAttribute('d').match(/L/g) || []).length") == 2,
        timeout=30, interval=0.1)
    seen = _refreshes(browser)
    eventually(lambda: _refreshes(browser) >= seen + 1, timeout=30, interval=0.1)  # and one more, quiet
    assert browser.evaluate(TOUCHED) == ["curve quiet_2", "row quiet_2"]
    asked = browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert any(url.endswith(f"/experiments/{experiment_id}/metrics?trial={held}") for url in asked), asked
    row = browser.evaluate("[...document.querySelectorAll('table.trials tbody tr')]"
                           ".find((tr) => tr.querySelector('a').textContent === 'quiet_2').textContent")
    assert "3" in row and "running" in row


def test_run_page_redraws_only_what_changed(browser: Browser, dashboard: str) -> None:
    """The run page too: a quiet refresh changes nothing; a stage finishing changes its node and its row."""
    store = open_store()
    run_id = store.create_run("pages_quiet_run", module="quiet", params={})
    store.add_stages(run_id, [
        {"node": "first", "stage": "first", "status": "succeeded", "upstream": [], "cache_key": "c" * 64},
        {"node": "second", "stage": "second", "status": "running", "upstream": ["first"], "cache_key": "d" * 64}])
    show(browser, dashboard, f"airflowless/runs/{run_id}", None, until=count("table.stages tbody tr") + " === 2")
    assert browser.evaluate(WATCH)
    eventually(lambda: _refreshes(browser) >= 1, timeout=30, interval=0.1)
    assert browser.evaluate(TOUCHED) == []
    store.update_stage(run_id, "second", status="succeeded")
    eventually(lambda: browser.evaluate(count("g.stage[data-status=succeeded]")) == 2, timeout=30, interval=0.1)
    touched = browser.evaluate(TOUCHED)
    assert touched and all(" graph" in t or t == "row second" for t in touched), touched
    assert browser.evaluate("document.querySelector('table.stages tbody tr:first-child td').textContent") == "first"


# -- serve: an application with two replicas -------------------------------------------------

@serve.deployment(num_replicas=2)
class Hello:
    def __call__(self, body: Any) -> dict[str, Any]:
        return {"hello": body}


def test_serve_page_shows_deployments_and_replicas_and_scales(browser: Browser, dashboard: str,
                                                                cluster_client: Any) -> None:
    import json
    import urllib.request

    serve.start(http_options={"port": 0})
    try:
        serve.run(Hello.bind(), name="pages-hello", route_prefix="/hello")
        for i in range(5):
            request = urllib.request.Request(serve.http_address() + "/hello", data=json.dumps(i).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert json.loads(response.read()) == {"hello": i}
        def replicas_reported() -> bool:  # the serve runtime reports to the scheduler once a second
            live = json.loads(fetch(dashboard + "airflowless/api/v1/live/serve")[1])
            return any(len(d.get("replicas", [])) == 2 for d in live.get("deployments", []))

        eventually(replicas_reported, timeout=60, interval=0.2)
        dom = show(browser, dashboard, "airflowless/serve", "serve", until=f"{count('table.replicas tbody tr')} === 2")
        assert re.search(r'<table class="af serving">.*<td>pages-hello</td><td>Hello</td>.*2 / 2', dom, re.S)
        assert len(re.findall(r'<table class="af replicas">', dom)) == 1
        assert re.search(r'<table class="af deployments">.*<td>pages-hello</td>.*<td>Hello</td>', dom, re.S)

        # scale to one replica from the page: the token goes in the navigation bar's field first
        from airflowless.control import mount

        ctx = mount.installed(cluster_client.cluster.scheduler)
        assert ctx is not None and ctx.token
        browser.evaluate(f"const t = document.getElementById('af-token'); t.value = {json.dumps(ctx.token)}; "
                         "t.dispatchEvent(new Event('change'))")
        browser.evaluate("const i = document.querySelector('input.af-replicas'); i.value = '1'; "
                         "i.dispatchEvent(new Event('input'))")
        browser.evaluate("document.querySelector('button[data-action$=\"/scale\"]').click()")
        eventually(lambda: browser.evaluate(count("table.replicas tbody tr")) == 1, timeout=60,
                   message=lambda: str(browser.evaluate("document.getElementById('status').textContent")))
        assert "2 / 2" not in browser.evaluate("document.querySelector('table.serving').textContent")
    finally:
        serve.shutdown()


# -- the service's deployments: state, last runs, the queue, and the pause and trigger actions ---

def test_deployments_page_shows_the_schedules_the_queue_and_pauses_and_triggers(browser: Browser, dashboard: str,
                                                                                cluster_client: Any) -> None:
    import json

    from airflowless.control import mount
    from airflowless.service.schedules import Schedule
    from airflowless.store import open_store
    from airflowless.store.liveness import this_driver

    store = open_store()
    store.set_pool("gpu", 0)
    store.create_pipeline_deployment("nightly-taxi", pipeline="taxi", target="/x/taxi.py:taxi", params={},
                                     schedule=Schedule.parse(cron="0 3 * * *", timezone="Europe/Berlin"),
                                     max_active_runs=1, pool="gpu")
    broken = store.create_pipeline_deployment("old-report", pipeline="report", target="/x/report.py:report",
                                              params={}, schedule=None)
    store.mark_deployment_broken(broken, "PipelineLoadError: importing the pipeline module failed: <b>gone</b>")
    waiting = store.enqueue_run("taxi", target="/x/taxi.py:taxi", params={}, trigger="submit", pool="gpu")
    assert store.claim_runs(store.register_service(this_driver(), None)) == []  # a service's pass says why it waits
    dom = show(browser, dashboard, "airflowless/deployments", "deployments",
               until=f"{count('table.queue tbody tr')} === 1 && {count('table.pipeline-deployments tbody tr')} === 2")
    assert re.search(r"<td>nightly-taxi</td><td>taxi</td><td>0 3 \* \* \* \(Europe/Berlin\)</td>", dom), dom
    assert "&lt;b&gt;gone&lt;/b&gt;" in dom  # the broken one says why, as text
    assert f"#{waiting}" in dom and "pool 'gpu' is full (0 of 0 slots taken)" in dom

    ctx = mount.installed(cluster_client.cluster.scheduler)
    assert ctx is not None and ctx.token
    browser.evaluate(f"const t = document.getElementById('af-token'); t.value = {json.dumps(ctx.token)}; "
                     "t.dispatchEvent(new Event('change')); window.confirm = () => true")
    browser.evaluate("document.querySelector('button[data-action$=\"nightly-taxi/pause\"]').click()")
    eventually(lambda: store.get_pipeline_deployment("nightly-taxi")["paused"], timeout=30)
    before = {r.id for r in store.queued_runs()}
    browser.evaluate("document.querySelector('button[data-action$=\"nightly-taxi/trigger\"]').click()")
    triggered = eventually(lambda: {r.id for r in store.queued_runs()} - before, timeout=30)
    assert store.get_run(next(iter(triggered))).trigger == "manual"
    store.close()


_TYPED = """
from airflowless import pipeline, stage

@stage
def total(n: int, rate: float, exact: bool, tags: list[str]) -> float:
    return n * rate

@pipeline
def typed(n: int, rate: float = 0.5, exact: bool = False, tags: list[str] | None = None):
    return total(n, rate, exact, tags or [])
"""


def test_deployments_page_draws_the_last_runs_by_stage_and_triggers_from_a_form_of_typed_parameters(
        browser: Browser, dashboard: str, cluster_client: Any, tmp_path: Path) -> None:
    """The grid: one square per stage and run, coloured by state (a mapped stage's items folded into it). The
    Trigger form: a field per parameter of the pipeline's module, in its type, filled with what a run gets;
    a wrong value's 422 is shown in the form, a right one queues a run with the values changed."""
    import json

    from airflowless.control import mount
    from airflowless.service.deploy import deploy

    store = open_store()
    module = tmp_path / "typed.py"
    module.write_text(_TYPED)
    deployment_id = deploy(str(module), "typed-report", params={"n": 3}, store=store)["id"]
    ran = []
    for outcome in ("succeeded", "failed"):
        run_id = store.enqueue_run("typed", target="t", params={}, trigger="manual", deployment_id=deployment_id)
        store.add_stages(run_id, [{"node": node, "stage": node.partition("[")[0], "status": how, "upstream": [],
                                   "cache_key": f"{run_id}-{node}"}
                                  for node, how in [("make", "succeeded"), ("score[0]", outcome), ("score", outcome)]])
        store.finish_run(run_id, outcome)
        ran.append(run_id)

    grid = "table.af-grid[data-deployment='typed-report']"
    show(browser, dashboard, "airflowless/deployments", "deployments-grid",
         until=f"{count(grid + ' tbody tr')} === 2")
    cells = browser.evaluate(f"[...document.querySelectorAll(\"{grid} tbody tr\")].map((tr) => "
                             "[tr.cells[0].textContent, ...[...tr.querySelectorAll('.af-cell')].map((c) => c.className)])")
    assert cells == [["make", "af-cell s-succeeded", "af-cell s-succeeded"],
                     ["score", "af-cell s-succeeded", "af-cell s-failed"]], cells  # oldest run on the left

    ctx = mount.installed(cluster_client.cluster.scheduler)
    assert ctx is not None and ctx.token
    browser.evaluate(f"const t = document.getElementById('af-token'); t.value = {json.dumps(ctx.token)}; "
                     "t.dispatchEvent(new Event('change'))")
    browser.evaluate("document.querySelector('button[data-form=\"typed-report\"]').click()")
    form = "form.af-trigger[data-deployment='typed-report']"
    eventually(lambda: browser.evaluate(count(form + " input")) == 4, timeout=60,
               message=lambda: str(browser.evaluate("document.getElementById('trigger').textContent")))
    fields = browser.evaluate(f"[...document.querySelectorAll(\"{form} input\")].map((i) => "
                              "[i.name, i.type, i.type === 'checkbox' ? i.checked : i.value])")
    assert fields == [["n", "number", "3"], ["rate", "number", "0.5"], ["exact", "checkbox", False],
                      ["tags", "text", ""]], fields

    def fill(tags: str | None) -> str:
        said = f"document.querySelector(\"{form} .af-trigger-said\").textContent"
        browser.evaluate(f"document.querySelector(\"{form} .af-trigger-said\").textContent = ''")
        edit = "" if tags is None else f"f.elements.tags.value = {json.dumps(tags)}; f.elements.exact.checked = true; "
        browser.evaluate(f"{{ const f = document.querySelector(\"{form}\"); {edit}f.requestSubmit() }}")
        return str(eventually(lambda: (lambda text: text if text not in ("", "queueing…") else None)(
            browser.evaluate(said)), timeout=60))

    before = {r.id for r in store.queued_runs()}
    untouched = fill(None)  # nothing edited: the deployment's parameters, nothing the form made up
    (plain,) = {r.id for r in store.queued_runs()} - before
    assert f"run #{plain}" in untouched and "with the deployment's parameters" in untouched, untouched
    assert store.get_run(plain).params == {"n": 3}
    before = {r.id for r in store.queued_runs()}
    wrong = fill("[1, 2]")
    assert "tags" in wrong and "str" in wrong, wrong  # the 422 names the parameter and what it expects
    assert {r.id for r in store.queued_runs()} == before
    right = fill('["a", "b"]')
    queued = {r.id for r in store.queued_runs()} - before
    assert len(queued) == 1 and f"run #{next(iter(queued))}" in right, right
    run = store.get_run(next(iter(queued)))
    assert run.trigger == "manual" and run.params == {"n": 3, "exact": True, "tags": ["a", "b"]}
    store.close()


# -- models: the registry's models, and one model's versions with aliases and lineage links ---

def test_models_pages_show_the_registry_with_aliases_and_lineage(browser: Browser, dashboard: str,
                                                                  tmp_path: Path) -> None:
    from airflowless import models
    from airflowless.store import open_store
    from tests.serve.test_predictor import make_checkpoint

    store = open_store()
    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    experiment = store.create_experiment("tune-taxi", kind="tune", config={})
    trial = store.add_trial(experiment, "trial_0", config={})
    store.add_checkpoint(trial, 3, checkpoint.path, {"auc": 0.9})
    first = models.register("taxi-big-tip", checkpoint, metrics={"auc": 0.912345}, tags={"data": "2026-11"},
                            store=store)
    models.register("taxi-big-tip", checkpoint, description="<i>retrained</i>", store=store)
    models.set_alias("taxi-big-tip", "champion", first.version, store=store)
    dom = show(browser, dashboard, "airflowless/models", "models", until=f"{count('table.models tbody tr')} >= 1")
    assert re.search(r'<a href="[^"]*/airflowless/models/taxi-big-tip">taxi-big-tip</a></td><td[^>]*>2</td>', dom), dom
    assert "champion → 1" in dom
    dom = show(browser, dashboard, "airflowless/models/taxi-big-tip", "model",
               until=f"{count('table.model-versions tbody tr')} === 2")
    assert "auc=0.9123" in dom and "data=2026-11" in dom and "&lt;i&gt;retrained&lt;/i&gt;" in dom
    assert f'/airflowless/trials/{trial}">trial {trial}</a>' in dom
    assert f'/airflowless/experiments/{experiment}">experiment {experiment}</a>' in dom
    store.close()


# -- data: a dataset whose map_batches waits on an Event while the page looks ----------------

def held_batch(batch: dict[str, Any], gate: str) -> dict[str, Any]:
    Event(gate).wait(120)
    return {"id": batch["id"] * 2}


def test_data_page_shows_the_streaming_operators(browser: Browser, dashboard: str) -> None:
    import json

    from airflowless import data

    gate = f"pages-data-{uuid.uuid4().hex[:8]}"
    dataset = data.range(400, parallelism=4).map_batches(held_batch, fn_kwargs={"gate": gate})
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.setdefault("rows", sum(1 for _ in dataset.iter_rows())),
                              daemon=True)
    thread.start()
    try:
        def streaming() -> bool:  # the executor reports to the scheduler once a second, from its first second on
            live = json.loads(fetch(dashboard + "airflowless/api/v1/live/data")[1])
            return any(e.get("operators") and not e.get("finished") for e in live.get("executions", []))

        eventually(streaming, timeout=60, interval=0.2)
        dom = show(browser, dashboard, "airflowless/data", "data", until=count("section.af-execution table.operators tbody tr"))
        assert "streaming" in dom and re.search(r'<table class="af operators">.*MapBatches', dom, re.S), dom[-3000:]
        assert "budget" in dom
    finally:
        Event(gate).set()
        thread.join(120)
    assert done["rows"] == 400


# -- the index, and the link from the Dask dashboard -------------------------------------------

def test_index_page(browser: Browser, dashboard: str) -> None:
    store = open_store()
    run_id = store.create_run("pages_index_run", module="index", params={})
    store.finish_run(run_id, "succeeded")
    store.create_experiment("pages-index-experiment", kind="tune", config={})
    dom = show(browser, dashboard, "airflowless/", "index",
               until="document.getElementById('latest-experiments').textContent.includes('pages-index-experiment')")
    assert re.search(rf'id="latest-runs".*href="/airflowless/runs/{run_id}".*pages_index_run', dom, re.S)
    assert 'href="/airflowless/data"' in dom and 'href="/airflowless/serve"' in dom


def test_markup_in_the_record_stays_text(browser: Browser, dashboard: str) -> None:
    """A run named (and failing) with markup shows that markup as text, and runs none of it."""
    evil = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
    store = open_store()
    run_id = store.create_run(evil, module="evil", params={})
    store.add_stages(run_id, [{"node": "bad", "stage": "bad", "status": "failed", "upstream": [],
                               "cache_key": "e" * 64, "error": evil, "traceback": evil}])
    store.finish_run(run_id, "failed", error=evil)
    show(browser, dashboard, f"airflowless/runs/{run_id}", None, until=count("table.stages tbody tr"))
    assert browser.evaluate("document.title") != "pwned"
    assert browser.evaluate(count("#main img, #main script")) == 0
    assert browser.evaluate("document.getElementById('heading').textContent").endswith(evil)
    assert evil in browser.evaluate("document.querySelector('table.stages').textContent")


def test_the_dask_dashboard_links_to_the_pages(dashboard: str) -> None:
    import json

    status, html, _ = fetch(dashboard + "status")
    assert status == 200 and '<a href="airflowless">Airflowless</a>' in html
    status, body, _ = fetch(dashboard + "individual-plots.json")
    plots = json.loads(body)
    assert plots["Airflowless Runs"] == "/airflowless/runs"
    assert plots["Airflowless Experiments"] == "/airflowless/experiments"
    assert "Individual Task Stream" in plots
    status, html, _ = fetch(dashboard + "airflowless/runs")
    assert status == 200 and '<a class="af-link af-dask" href="/status">Dask dashboard</a>' in html  # and back


# -- a scheduler the user runs: `dask scheduler --preload airflowless.dashboard` ---------------

@pytest.fixture
def preloaded_scheduler(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real ``dask scheduler --preload airflowless.dashboard`` process (no worker: pages need none)."""
    import subprocess
    import sys

    dask = shutil.which("dask", path=str(Path(sys.executable).parent))
    assert dask, "the dask command is installed with distributed"
    db = f"sqlite:///{tmp_path / 'record.db'}"
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "AIRFLOWLESS_DB": db}
    scheduler = subprocess.Popen(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
         "--preload", "airflowless.dashboard"],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(scheduler.stderr or []), daemon=True).start()
    try:
        def link() -> str | None:
            assert scheduler.poll() is None, "".join(log)
            return next((m.group(1) for line in list(log)
                         if (m := re.search(r"airflowless: control plane at (\S+) ", line))), None)

        yield {"link": eventually(link, timeout=90, message=lambda: "".join(log)), "db": db}
    finally:
        stop(scheduler)


def test_pages_on_a_preloaded_dask_scheduler(browser: Browser, preloaded_scheduler: dict[str, Any]) -> None:
    import json

    store = open_store(preloaded_scheduler["db"])
    run_id = store.create_run("outside_pipeline", module="m", params={})
    store.add_stages(run_id, [
        {"node": "extract", "stage": "extract", "status": "succeeded", "upstream": [], "cache_key": "a" * 64},
        {"node": "report", "stage": "report", "status": "failed", "upstream": ["extract"], "cache_key": "b" * 64,
         "error": "ValueError: no rows"}])
    store.finish_run(run_id, "failed", error="stage report failed")
    store.close()
    link = preloaded_scheduler["link"]  # http://127.0.0.1:<port>/airflowless/
    dom = browser.show(f"{link}runs/{run_id}", until=f"({DRAWN}) && {count('g.stage')} === 2",
                       screenshot=ARTIFACTS / "pages-preload-run.png")
    assert _stage_states(dom) == {"extract": "succeeded", "report": "failed"}
    assert "ValueError: no rows" in dom
    dashboard = link.removesuffix("airflowless/")
    status, html, _ = fetch(dashboard + "status")
    assert status == 200 and '<a href="airflowless">Airflowless</a>' in html
    plots = json.loads(fetch(dashboard + "individual-plots.json")[1])
    assert plots["Airflowless Serve"] == "/airflowless/serve" and "Individual Task Stream" in plots


def test_a_trial_page_joins_the_pages_of_a_long_history(browser: Browser, dashboard: str) -> None:
    """10,005 reports come in two pages of the metrics read; the trial page shows the last of them."""
    store = open_store()
    experiment_id = store.create_experiment("long", kind="tune", config={}, metric="loss", mode="min")
    trial_id = store.add_trial(experiment_id, "t0", config={})
    store.record_batch([(trial_id, step, {"loss": 1 / step}) for step in range(1, 10_006)], {})
    show(browser, dashboard, f"airflowless/trials/{trial_id}", None,
         until="/10005/.test(document.querySelector('table.reports') ? "
               "document.querySelector('table.reports').textContent : '')")
