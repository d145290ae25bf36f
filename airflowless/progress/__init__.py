"""Live tables for long work: a refreshed HTML table in notebooks, a rich live table on terminals.

>>> table = LiveTable("trials", ["trial", "status", "loss"])      # doctest: +SKIP
>>> table.update([["trial_00000", "RUNNING", 0.5]])                 # doctest: +SKIP
>>> table.close()                                                    # doctest: +SKIP

Nothing is shown when output is neither a notebook nor a terminal (CI logs,
pipes), and updates are throttled to ``min_interval_s``.
"""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["LiveTable", "surface"]


def surface() -> str | None:
    """"notebook", "terminal" or None (nowhere to show a live table)."""
    if "ipykernel" in sys.modules:
        try:
            from IPython import get_ipython

            if get_ipython() is not None:
                return "notebook"
        except ImportError:
            pass
    return "terminal" if sys.stderr.isatty() else None


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 60 else text[:59] + "…"


class LiveTable:
    def __init__(self, title: str, columns: Sequence[str], *, min_interval_s: float = 1.0) -> None:
        self.title, self.columns = title, list(columns)
        self.min_interval_s = min_interval_s
        self.where = surface()
        self._last = 0.0
        self._handle: Any = None
        self._live: Any = None

    def update(self, rows: Sequence[Sequence[Any]], *, force: bool = False) -> None:
        if self.where is None or (not force and time.monotonic() - self._last < self.min_interval_s):
            return
        self._last = time.monotonic()
        if self.where == "notebook":
            from IPython.display import HTML, display

            head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
                           for row in rows)
            page = HTML(f"<b>{html.escape(self.title)}</b><table><tr>{head}</tr>{body}</table>")
            if self._handle is None:
                self._handle = display(page, display_id=True)
            else:
                self._handle.update(page)
            return
        from rich.live import Live
        from rich.table import Table

        table = Table(title=self.title, title_justify="left")
        for column in self.columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        if self._live is None:
            from rich.console import Console

            self._live = Live(table, console=Console(stderr=True), auto_refresh=False)
            self._live.start()
        self._live.update(table, refresh=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
