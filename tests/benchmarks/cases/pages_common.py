"""What the pages-cost cases share: the control plane's pages open in headless Chromium or closed.

``PAGES=open`` starts Chromium (tests/support/pages.py) on the embedded
cluster's control plane; ``PAGES=closed`` starts none. Either way the dashboard
is on and the scheduler counts the API requests it answers, so a case can show
that an open page really polled while the work ran (and a closed one did not).
"""

import atexit
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

from airflowless import tune

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests.support.pages

OPEN = os.environ.get("PAGES", "closed") == "open"
OPENED = []  # the Pages of this process (a Tune callback finds them here: callbacks are pickled by reference)
DRAWN = "/^updated/.test((document.getElementById('status') || {}).textContent || '')"
SETTLE_S = 2.0  # after setup, both modes wait this long: Chromium's start-up is not the pages' cost


def _count_api_requests(dask_scheduler):
    """On the scheduler: count the answers its HTTP server gives under /airflowless/api/."""
    counts = {"api": 0, "api_errors": 0}

    def log(handler):
        if "/airflowless/api/" in handler.request.path:
            counts["api"] += 1
            counts["api_errors"] += handler.get_status() >= 400

    dask_scheduler.http_application.settings["log_function"] = log
    dask_scheduler.airflowless_bench_counts = counts


def _counts(dask_scheduler):
    return dict(dask_scheduler.airflowless_bench_counts)


class Pages:
    """The control plane of ``client``'s cluster, with a Chromium page on it when ``PAGES=open``."""

    def __init__(self, client):
        self.client = client
        self.base = client.dashboard_link.rsplit("/", 1)[0] + "/airflowless/"
        client.run_on_scheduler(_count_api_requests)
        self.browser = None
        if OPEN:
            from tests.support.pages import Browser

            self.browser = Browser()
            atexit.register(self.close)  # a case that fails still ends its Chromium (it runs in a session of its own)
        OPENED.append(self)

    def show(self, path, until=DRAWN):
        """Open ``path`` (under /airflowless/) and wait until its script has drawn; then let things settle."""
        if self.browser is not None:
            self.browser.show(self.base + path, until=f"({DRAWN}) && ({until})", timeout=120)
        time.sleep(SETTLE_S)

    def show_newest_experiment_soon(self):
        """Open the newest experiment's page from a thread (the caller goes on working)."""
        if self.browser is None:
            return

        def go():
            import json

            with urllib.request.urlopen(self.base + "api/v1/experiments?limit=1", timeout=30) as answer:
                newest = json.load(answer)["experiments"][0]["id"]
            self.browser.navigate(f"{self.base}experiments/{newest}")

        threading.Thread(target=go, name="open-experiment-page", daemon=True).start()

    def served(self):
        """How many API requests the scheduler has answered so far (and how many were errors)."""
        return self.client.run_on_scheduler(_counts)

    def check(self, until, timeout=120):
        """Wait until the open page's ``until`` holds (the page drew what the work made); its status line."""
        if self.browser is None:
            return "closed"
        deadline = time.monotonic() + timeout
        condition = f"({DRAWN}) && ({until})"
        while not self.browser.evaluate(condition):
            if time.monotonic() > deadline:
                status = self.browser.evaluate("(document.getElementById('status') || {}).textContent")
                raise AssertionError(f"the page never showed {until!r} (status line {status!r})")
            time.sleep(0.5)
        return self.browser.evaluate("document.getElementById('status').textContent")

    def close(self):
        if self.browser is not None:
            self.browser.close()
            self.browser = None


class OpenExperimentPage(tune.Callback):
    """Once a search is in the record, point the open page at it (nothing when the pages are closed)."""

    def setup(self, **info):
        for pages in OPENED:
            pages.show_newest_experiment_soon()


def _cpu_seconds(process):
    """CPU seconds used so far by ``process`` and its children (0 for None)."""
    import psutil

    if process is None:
        return 0.0
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        try:
            times = each.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def measured(pages, work):
    """Run ``work()`` (its figures), timed, with the API requests the scheduler answered meanwhile and the
    CPU seconds this process (the driver and the scheduler) and the browser used meanwhile."""
    import psutil

    me = psutil.Process()
    browser = psutil.Process(pages.browser._process.pid) if pages.browser is not None else None
    before, driver, chromium = pages.served(), me.cpu_times(), _cpu_seconds(browser)
    start = time.perf_counter()
    figures = work()
    seconds = time.perf_counter() - start
    after, driver_after = pages.served(), me.cpu_times()
    return {**figures, "work_seconds": seconds, "api_requests": after["api"] - before["api"],
            "api_errors": after["api_errors"] - before["api_errors"],
            "driver_cpu_s": driver_after.user + driver_after.system - driver.user - driver.system,
            "browser_cpu_s": _cpu_seconds(browser) - chromium}
