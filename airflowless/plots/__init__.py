"""Bokeh pictures of results: learning curves of trials, and where a dataset's time went.

>>> from airflowless.plots import learning_curves
>>> fig = learning_curves({"trial_0": [{"training_iteration": 1, "loss": 2.0},
...                                    {"training_iteration": 2, "loss": 1.0}]}, "loss")
>>> fig.yaxis[0].axis_label
'loss'

``Result.plot``, ``ResultGrid.plot`` and ``Dataset.stats().plot`` draw with
these. In a notebook, run ``bokeh.io.output_notebook()`` once, then make the
picture the cell's value (``grid.plot()`` as its last line): it is interactive
while the notebook runs and keeps a still PNG for GitHub and nbviewer once saved
(:mod:`.notebook`; the PNG is drawn with matplotlib, :mod:`.static`).
``bokeh.io.show(fig)`` works too, interactive only. Bokeh comes with the Dask
dashboard; it is imported when a picture is first drawn.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..errors import ConfigError, UsageError
from ..store.records import AUTO_FILLED

__all__ = ["learning_curves", "operator_chart", "first_metric", "ITERATION"]

ITERATION = "training_iteration"
_NOT_METRICS = frozenset({ITERATION, *AUTO_FILLED})  # what a trial's reports carry besides its own metrics
# Okabe and Ito's palette, told apart with any colour vision; the best trial takes its vermilion
BEST_COLOR = "#D55E00"
_OTHER_COLORS = ("#0072B2", "#009E73", "#E69F00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")


def _shown(model: Any) -> Any:
    """``model``, tagged so that a notebook shows it interactive and keeps a still PNG (:mod:`.notebook`)."""
    from .notebook import TAG, offer

    model.tags = [*model.tags, TAG]
    offer()
    return model


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def first_metric(histories: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    """The first numeric metric reported (other than the iteration count): what a plot shows by default."""
    for history in histories:
        for report in history:
            for key, value in report.items():
                if key not in _NOT_METRICS and not key.startswith("_") and _number(value) is not None:
                    return key
    raise ConfigError("nothing to plot: no report has a numeric metric; pass metric='<name>' of a reported "
                     "number, after the trials reported some")


def learning_curves(histories: Mapping[str, Sequence[Mapping[str, Any]]], metric: str, *,
                    best: str | None = None, failed: Collection[str] = (), title: str | None = None) -> Any:
    """A Bokeh figure: ``metric`` over ``training_iteration``, one line per entry of ``histories``.

    ``best`` (a key of ``histories``) is drawn thick in vermilion and named in the
    legend; the keys in ``failed`` are dashed. Each line renderer is named after
    its key; hovering shows the trial, the iteration and the value.
    """
    from bokeh.models import BasicTicker, ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    if not isinstance(metric, str):
        raise UsageError(f"metric must be the name of a reported metric, got {metric!r}")
    fig = figure(title=title or metric, x_axis_label=ITERATION, y_axis_label=metric, height=320,
                 sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,save")
    plotted = 0
    ordered = sorted(histories, key=lambda label: label == best)  # the best is drawn last, on top
    for index, label in enumerate(ordered):
        points = [(report.get(ITERATION, i + 1), _number(report.get(metric)))
                  for i, report in enumerate(histories[label])]
        xs = [x for x, y in points if y is not None]
        ys = [y for x, y in points if y is not None]
        if not ys:
            continue
        source = ColumnDataSource({"x": xs, "y": ys, "trial": [label] * len(xs)})
        style: dict[str, Any] = {"line_dash": "dashed"} if label in failed else {}
        if label == best:
            fig.line("x", "y", source=source, name=label, line_width=4, color=BEST_COLOR,
                     legend_label=f"best: {label}", **style)
        else:
            fig.line("x", "y", source=source, name=label, line_width=2.5, alpha=0.85,
                     color=_OTHER_COLORS[index % len(_OTHER_COLORS)], **style)
        plotted += 1
    if plotted == 0:
        reported = sorted({k for h in histories.values() for r in h for k in r if _number(r[k]) is not None})
        raise ConfigError(f"no trial reported {metric!r} as a number; numeric metrics reported: {reported}")
    fig.add_tools(HoverTool(tooltips=[("trial", "@trial"), (ITERATION, "@x"), (metric, "@y")]))
    fig.xaxis.ticker = BasicTicker(min_interval=1)  # whole iterations: never a tick at 10.75
    if best is not None and best in histories:
        fig.legend.location = "top_right"
    return _shown(fig)


def operator_chart(operators: Sequence[tuple[str, float | None, int | None]], *, title: str = "operators") -> Any:
    """Two bar charts side by side: each operator's wall time (s) and rows out, one bar each.

    ``operators`` are ``(name, seconds, rows)``, drawn top to bottom; ``None`` (unknown) draws no bar.
    """
    from bokeh.layouts import row
    from bokeh.models import ColumnDataSource, DataRange1d, FactorRange
    from bokeh.plotting import figure

    if not operators:
        raise ConfigError("nothing to plot: no operator ran yet; iterate or materialize the dataset first")
    names = [name for name, _, _ in operators]
    source = ColumnDataSource({"operator": names, "seconds": [s or 0.0 for _, s, _ in operators],
                               "rows": [r or 0 for _, _, r in operators]})
    height = 80 + 30 * len(names)
    operators_range = FactorRange(factors=list(reversed(names)))  # the first one at the top
    time_fig = figure(y_range=operators_range, x_range=DataRange1d(start=0), title=f"{title}: wall time", x_axis_label="seconds", height=height,
                      width=480, tools="hover,save", tooltips=[("operator", "@operator"), ("seconds", "@seconds")])
    time_fig.hbar(y="operator", right="seconds", height=0.7, source=source, color="#0072B2", name="seconds")
    rows_fig = figure(y_range=operators_range, x_range=DataRange1d(start=0), title=f"{title}: rows out", x_axis_label="rows", height=height,
                      width=360, tools="hover,save", tooltips=[("operator", "@operator"), ("rows", "@rows")])
    rows_fig.hbar(y="operator", right="rows", height=0.7, source=source, color="#009E73", name="rows")
    rows_fig.yaxis.visible = False
    return _shown(row(time_fig, rows_fig))
