"""The pages' tornado handlers: one HTML shell per page, and the scripts and styles beside it.

A page handler renders ``templates/page.html`` with the page's name, the id in
its URL (escaped by the template) and the URL root the scripts fetch from; the
script ``static/<page>.js`` does the rest. Where a page reads the record and no
store is configured, the shell says so instead of loading the script.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from tornado import template, web

from . import PAGES

__all__ = ["STATIC", "PageHandler", "StaticHandler"]

HERE = os.path.dirname(__file__)
STATIC = os.path.join(HERE, "static")

_PREFIX = re.compile(r"^(.*?)/airflowless(?:/|$)")  # what a scheduler's http_prefix put before the pages

NO_STORE = ("No airflowless store is configured here, so there are no runs, experiments or trials to show. "
            "Set AIRFLOWLESS_DB (a SQLAlchemy URL) or AIRFLOWLESS_HOME where the scheduler starts, "
            "or open the record with `airflowless ui --db URL`.")


@functools.cache
def _loader() -> template.Loader:
    """The templates, read when a page is first opened (nothing here runs at install time)."""
    return template.Loader(os.path.join(HERE, "templates"), autoescape="xhtml_escape")


@functools.cache
def _version() -> str:
    """Changes when a static file changes, so browsers never keep an old script."""
    return str(max(int(os.stat(os.path.join(STATIC, name)).st_mtime) for name in os.listdir(STATIC)))


class PageHandler(web.RequestHandler):
    """``GET`` one page: ``page`` names it (a key of :data:`PAGES`), the URL's group is its id."""

    def initialize(self, ctx: Any, page: str) -> None:
        self.ctx = ctx
        self.page = page

    def get(self, ident: str | None = None) -> None:
        match = _PREFIX.match(self.request.path)
        prefix = match.group(1) if match else ""
        root = prefix + "/airflowless"
        title, reads_store = PAGES[self.page]
        heading = title if ident is None else f"{title} {ident}"
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Content-Security-Policy",
                        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                        "frame-ancestors 'none'")  # no other site frames the pages (clickjacking)
        self.write(_loader().load("page.html").generate(
            page=self.page, ident=ident or "", heading=heading, root=root, version=_version(),
            dask_root=prefix + "/" if self.ctx.scheduler is not None else None,
            no_store=NO_STORE if reads_store and self.ctx.current_store_url() is None else None,
            nav=[(name, PAGES[name][0]) for name in ("runs", "experiments", "deployments", "models", "data",
                                                     "serve")]))


class StaticHandler(web.StaticFileHandler):
    """The pages' scripts and styles (cached by the browser; each page asks for its version)."""
