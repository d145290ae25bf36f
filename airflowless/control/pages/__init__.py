"""The airflowless pages on the Dask dashboard: runs, experiments, trials, data, serve, deployments.

Each page is a small HTML shell (``templates/page.html``) and a script
(``static/<page>.js``) that fetches the JSON API under ``<root>/api/v1`` every
few seconds and draws tables, the stage graph and learning curves as inline SVG
(no build step, nothing from a CDN). The server never puts a record's text in
the HTML: scripts write it as text nodes, so a run name or an error cannot
inject markup.

To add a page: a name in :data:`PAGES` (with its title and whether it needs the
store), a ``static/<name>.js`` that fills ``#main``, and a route in :func:`routes`.

Importing this package costs ``tornado.web`` only (already loaded by
distributed); the handlers and templates load when a page is first opened.

>>> from airflowless.control.context import ControlContext
>>> [path for path, *_ in routes(ControlContext(None))][:3]
['/airflowless/?', '/airflowless/runs/?', '/airflowless/runs/([^/]+)']
"""

from __future__ import annotations

from typing import Any

__all__ = ["PAGES", "link_from_dashboard", "links", "routes"]

#: page name -> (title, reads the store)
PAGES: dict[str, tuple[str, bool]] = {
    "index": ("airflowless", True),
    "runs": ("Runs", True),
    "run": ("Run", True),
    "experiments": ("Experiments", True),
    "experiment": ("Experiment", True),
    "trial": ("Trial", True),
    "data": ("Data", False),
    "serve": ("Serve", False),
    "deployments": ("Deployments", True),
    "models": ("Models", True),
    "model": ("Model", True),
}

#: label -> path, as distributed's ``/individual-plots.json`` lists them (JupyterLab's Dask extension reads it)
INDIVIDUAL_PLOTS = {
    "Airflowless Runs": "/airflowless/runs",
    "Airflowless Experiments": "/airflowless/experiments",
    "Airflowless Data": "/airflowless/data",
    "Airflowless Serve": "/airflowless/serve",
    "Airflowless Deployments": "/airflowless/deployments",
    "Airflowless Models": "/airflowless/models",
}


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    """The pages' tornado rules, with absolute paths under ``/airflowless`` (a scheduler's
    ``http_prefix`` is the mounter's to add). Mounted on a scheduler (``ctx.scheduler`` set),
    they also answer ``/individual-plots.json``: distributed's list plus the pages."""
    from . import handlers

    def page(name: str) -> dict[str, Any]:
        return {"ctx": ctx, "page": name}

    rules: list[tuple[str, type, dict[str, Any]]] = [
        (r"/airflowless/?", handlers.PageHandler, page("index")),
        (r"/airflowless/runs/?", handlers.PageHandler, page("runs")),
        (r"/airflowless/runs/([^/]+)", handlers.PageHandler, page("run")),
        (r"/airflowless/experiments/?", handlers.PageHandler, page("experiments")),
        (r"/airflowless/experiments/([^/]+)", handlers.PageHandler, page("experiment")),
        (r"/airflowless/trials/([^/]+)", handlers.PageHandler, page("trial")),
        (r"/airflowless/data/?", handlers.PageHandler, page("data")),
        (r"/airflowless/serve/?", handlers.PageHandler, page("serve")),
        (r"/airflowless/deployments/?", handlers.PageHandler, page("deployments")),
        (r"/airflowless/models/?", handlers.PageHandler, page("models")),
        (r"/airflowless/models/([^/]+)", handlers.PageHandler, page("model")),
        (r"/airflowless/static/(.*)", handlers.StaticHandler, {"path": handlers.STATIC}),
    ]
    if ctx.scheduler is not None:
        from ..._dask_internals import individual_plots_handler

        rules.append((r"/individual-plots.json", individual_plots_handler(INDIVIDUAL_PLOTS),
                      {"dask_server": ctx.scheduler}))
    return rules


def link_from_dashboard(scheduler: Any) -> None:
    """Add an "airflowless" entry to the navigation bar of ``scheduler``'s Dask dashboard
    (and the pages to its "More..." menu). Does nothing when the dashboard is off."""
    from ..._dask_internals import add_dashboard_nav_entry

    add_dashboard_nav_entry(scheduler, "airflowless",
                            [(path.strip("/"), label) for label, path in INDIVIDUAL_PLOTS.items()])


def links(client: Any) -> dict[str, str]:
    """The addresses of the pages on the dashboard of ``client``'s cluster, by page.

    >>> class Client:  # anything with distributed's ``dashboard_link``
    ...     dashboard_link = "http://127.0.0.1:8787/status"
    >>> links(Client())["runs"]
    'http://127.0.0.1:8787/airflowless/runs'
    """
    base = str(client.dashboard_link).rsplit("/", 1)[0] + "/airflowless"
    return {"index": base + "/", **{name: f"{base}/{name}" for name in ("runs", "experiments", "data", "serve", "deployments",
                                                                           "models")}}
