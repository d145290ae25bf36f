"""A still picture (PNG) of the Bokeh figures :mod:`airflowless.plots` draws, made with matplotlib.

A saved notebook keeps what a cell displayed; Bokeh's interactive picture is
JavaScript that GitHub and nbviewer do not run, so a plot would be blank there.
This draws the same lines and bars again with matplotlib (no browser needed):
the glyphs these figures use (``Line``, ``HBar``), their colours, widths and
dashes, titles, axis labels and the legend, side by side for a ``Row``.

>>> from airflowless.plots import learning_curves
>>> fig = learning_curves({"t0": [{"training_iteration": 1, "loss": 2.0},
...                               {"training_iteration": 2, "loss": 1.0}]}, "loss")
>>> to_png(fig)[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import io
from typing import Any

from . import ITERATION

__all__ = ["to_png"]

_DASHES = {"solid": "-", "dashed": "--", "dotted": ":", "dotdash": "-.", "dashdot": "-."}


def _figures(model: Any) -> list[Any]:
    """The figures of ``model``, left to right (a figure, or a row/column of them)."""
    children = getattr(model, "children", None)
    if children is None:
        return [model]
    return [fig for child in children for fig in _figures(child)]


def _text(value: Any) -> str:
    """A Bokeh title or label (text, or a Title/Label model) as text."""
    if value is None:
        return ""
    return str(getattr(value, "text", value) or "")


def _draw(ax: Any, fig: Any) -> None:
    from bokeh.models import HBar, Line

    ax.set_title(_text(fig.title), fontsize=10, loc="left")
    ax.set_xlabel(_text(fig.xaxis[0].axis_label) if fig.xaxis else "")
    ax.set_ylabel(_text(fig.yaxis[0].axis_label) if fig.yaxis and fig.yaxis[0].visible else "")
    legend = {item.renderers[0].name: _text(item.label.get("value") if isinstance(item.label, dict) else item.label)
              for lg in fig.legend for item in lg.items if item.renderers}
    for renderer in fig.renderers:
        glyph, data = renderer.glyph, renderer.data_source.data
        if isinstance(glyph, Line):
            dash = glyph.line_dash if isinstance(glyph.line_dash, str) else "dashed" if glyph.line_dash else "solid"
            ax.plot(data[glyph.x], data[glyph.y], color=glyph.line_color, linewidth=glyph.line_width * 0.75,
                    alpha=glyph.line_alpha, linestyle=_DASHES.get(dash, "-"), label=legend.get(renderer.name))
        elif isinstance(glyph, HBar):
            names = list(data[glyph.y])
            ax.barh(range(len(names)), data[glyph.right], height=glyph.height, color=glyph.fill_color)
            ax.set_yticks(range(len(names)), names if fig.yaxis[0].visible else [""] * len(names))
            ax.invert_yaxis()  # the first one at the top, as the Bokeh chart draws it
    if ax.get_xlabel() == ITERATION:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no 10.75th iteration
    if any(legend.values()):
        ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)


def to_png(model: Any, *, dpi: int = 72) -> bytes:
    """``model`` (a figure of :mod:`airflowless.plots`, or a row of them) drawn as a PNG."""
    from matplotlib.figure import Figure  # no pyplot: nothing global, no GUI backend

    figures = _figures(model)
    widths = [fig.width or 600 for fig in figures]
    height = max(fig.height or 300 for fig in figures)
    total = sum(widths) if len(figures) > 1 else 720  # a stretched figure: a notebook's width
    picture = Figure(figsize=(total / 80, height / 80), dpi=dpi, layout="tight")
    axes = picture.subplots(1, len(figures), squeeze=False, width_ratios=widths)[0]
    for ax, fig in zip(axes, figures, strict=True):
        _draw(ax, fig)
    out = io.BytesIO()
    picture.savefig(out, format="png")
    return out.getvalue()
