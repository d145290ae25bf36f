"""The pages' handlers over a real tornado server with a real store (SQLite file, and
PostgreSQL when it is there): every page renders, ids are escaped, no store is said plainly,
the static files are served and only them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflowless.control import api, pages
from airflowless.control.context import ControlContext
from tests.support.pages import fetch, serve

PAGE_PATHS = {
    "index": "/airflowless/", "runs": "/airflowless/runs", "run": "/airflowless/runs/1",
    "experiments": "/airflowless/experiments", "experiment": "/airflowless/experiments/1",
    "trial": "/airflowless/trials/1", "data": "/airflowless/data", "serve": "/airflowless/serve",
    "deployments": "/airflowless/deployments", "models": "/airflowless/models", "model": "/airflowless/models/taxi",
}


def fill(url: str) -> dict[str, int]:
    """A record with a run of three stages (one failed, with markup in its error), and an experiment."""
    from airflowless.store import open_store

    store = open_store(url)
    run_id = store.create_run("taxi<script>alert('run')</script>", module="pipelines.taxi", params={"n": 1})
    store.add_stages(run_id, [
        {"node": "load", "stage": "load", "status": "succeeded", "upstream": [], "cache_key": "a" * 64},
        {"node": "clean", "stage": "clean", "status": "failed", "upstream": ["load"], "cache_key": "b" * 64},
    ])
    store.update_stage(run_id, "clean", error="ValueError: <img src=x onerror=alert(1)>", attempts=2)
    experiment_id = store.create_experiment("search", kind="tune", config={}, metric="loss", mode="min")
    trial_id = store.add_trial(experiment_id, "trial_0", config={"lr": 0.1}, status="running")
    store.add_metrics(trial_id, 1, {"loss": 0.5, "training_iteration": 1})
    return {"run": run_id, "experiment": experiment_id, "trial": trial_id}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('pages') / 'record.db'}"
    ids = fill(url)
    assert ids == {"run": 1, "experiment": 1, "trial": 1}
    ctx = ControlContext(url)
    with serve(api.routes(ctx) + pages.routes(ctx)) as base:
        yield base


@pytest.mark.timeout(60)
@pytest.mark.parametrize("page", sorted(PAGE_PATHS))
def test_every_page_renders_its_shell(server: str, page: str) -> None:
    status, body, headers = fetch(server + PAGE_PATHS[page])
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/html")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert f'data-page="{page}"' in body
    assert 'data-root="/airflowless"' in body
    assert f'src="/airflowless/static/{page}.js?v=' in body
    assert 'src="/airflowless/static/common.js?v=' in body
    for name in ("runs", "experiments", "deployments", "models", "data", "serve"):  # the navigation
        assert f'href="/airflowless/{name}"' in body
    assert "Dask dashboard" not in body  # no scheduler behind this server
    assert "<script>" not in body  # nothing inline: the CSP forbids it and no record text is here


@pytest.mark.timeout(60)
def test_the_nav_link_without_a_slash_opens_the_index(server: str) -> None:
    status, body, _ = fetch(server + "/airflowless")
    assert status == 200 and 'data-page="index"' in body


@pytest.mark.timeout(60)
def test_an_id_in_the_url_is_escaped(server: str) -> None:
    status, body, _ = fetch(server + "/airflowless/runs/%3Cscript%3Ealert(1)%3C%2Fscript%3E%22%20x%3D%22")
    assert status == 200
    assert "<script>alert(1)" not in body
    assert 'data-id="&lt;script&gt;alert(1)&lt;/script&gt;&quot; x=&quot;"' in body
    assert "<h1 id=\"heading\">Run &lt;script&gt;" in body


@pytest.mark.timeout(60)
def test_an_id_that_repeats_the_prefix_keeps_the_root(server: str) -> None:
    _, body, _ = fetch(server + "/airflowless/runs/airflowless")
    assert 'data-root="/airflowless"' in body and 'data-id="airflowless"' in body


@pytest.mark.timeout(60)
def test_record_text_never_reaches_the_html(server: str) -> None:
    """Names and errors go to the page only through the JSON API (and the scripts write them as text)."""
    _, body, _ = fetch(server + "/airflowless/runs/1")
    assert "taxi" not in body and "onerror" not in body
    status, data, headers = fetch(server + "/airflowless/api/v1/runs/1")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert "taxi<script>" in data  # JSON carries it verbatim; run.js sets it with textContent


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["common.js", "pages.css", "run.js", "experiment.js", "serve.js"])
def test_static_files_are_served(server: str, name: str) -> None:
    status, body, headers = fetch(server + f"/airflowless/static/{name}")
    assert status == 200 and body
    kind = "css" if name.endswith(".css") else "javascript"
    assert kind in headers["Content-Type"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["../handlers.py", "%2e%2e/handlers.py", "..%2f__init__.py", "/etc/passwd"])
def test_static_files_are_only_the_static_folder(server: str, path: str) -> None:
    status, body, _ = fetch(server + "/airflowless/static/" + path)
    assert status in (403, 404)
    assert "import" not in body


@pytest.mark.timeout(60)
def test_the_scripts_use_no_markup_sinks() -> None:
    """The scripts build elements and text nodes only: no innerHTML, outerHTML, insertAdjacentHTML,
    document.write or eval, so text from the record can never become markup."""
    static = Path(pages.__file__).parent / "static"
    scripts = sorted(static.glob("*.js"))
    assert {p.name for p in scripts} >= {"common.js", "index.js", "runs.js", "run.js", "experiments.js",
                                         "experiment.js", "trial.js", "data.js", "serve.js"}
    for script in scripts:
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in text, f"{script.name} uses {sink}"


@pytest.fixture(scope="module")
def no_store_server() -> Iterator[str]:
    ctx = ControlContext(None)
    with serve(api.routes(ctx) + pages.routes(ctx)) as base:
        yield base


@pytest.mark.timeout(60)
@pytest.mark.parametrize("page", ["index", "runs", "run", "experiments", "experiment", "trial"])
def test_without_a_store_the_record_pages_say_so(no_store_server: str, page: str) -> None:
    status, body, _ = fetch(no_store_server + PAGE_PATHS[page])
    assert status == 200
    assert 'id="nostore"' in body
    assert "No airflowless store is configured here" in body and "AIRFLOWLESS_DB" in body
    assert f"static/{page}.js" not in body  # nothing to fetch


@pytest.mark.timeout(60)
@pytest.mark.parametrize("page", ["data", "serve"])
def test_without_a_store_the_live_pages_still_load(no_store_server: str, page: str) -> None:
    status, body, _ = fetch(no_store_server + PAGE_PATHS[page])
    assert status == 200
    assert 'id="nostore"' not in body
    assert f"static/{page}.js" in body


def test_routes_are_under_airflowless_and_cheap_to_install() -> None:
    import subprocess
    import sys

    rules = pages.routes(ControlContext(None))
    assert all(path.startswith("/airflowless") for path, *_ in rules)
    assert not any(path.startswith("/individual") for path, *_ in rules)  # only when on a scheduler
    code = ("import sys, airflowless.control.pages as p; from airflowless.control.context import ControlContext; "
            "p.routes(ControlContext(None)); "  # what mount.install does at the scheduler's start
            "heavy = [m for m in ('sqlalchemy', 'airflowless.store', 'airflowless.control.reads') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _postgres_url() -> str:
    from tests.conftest import POSTGRES_URL, require_service

    try:
        import sqlalchemy

        sqlalchemy.create_engine(POSTGRES_URL).connect().close()
    except Exception as exc:  # noqa: BLE001 - any failure to reach it means "not here"
        require_service("postgresql", f"cannot connect to {POSTGRES_URL}: {exc}")
    return POSTGRES_URL


@pytest.mark.timeout(60)
def test_pages_over_postgresql() -> None:
    """The run page's JSON comes from PostgreSQL the same way (a schema of its own for this test)."""
    import uuid

    import sqlalchemy

    base_url = _postgres_url()
    schema = f"pages_{uuid.uuid4().hex[:8]}"
    engine = sqlalchemy.create_engine(base_url)
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text(f"CREATE SCHEMA {schema}"))
    url = f"{base_url}?options=-csearch_path%3D{schema}"
    try:
        ids = fill(url)
        ctx = ControlContext(url)
        with serve(api.routes(ctx) + pages.routes(ctx)) as base:
            status, body, _ = fetch(f"{base}/airflowless/runs/{ids['run']}")
            assert status == 200 and 'data-page="run"' in body
            status, data, _ = fetch(f"{base}/airflowless/api/v1/runs/{ids['run']}")
            assert status == 200 and re.search(r'"node": "clean"', data)
    finally:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"DROP SCHEMA {schema} CASCADE"))
        engine.dispose()


