"""Pictures: learning curves of Results and ResultGrids, and a dataset's per-operator chart (Bokeh objects)."""

from __future__ import annotations

from typing import Any

import pytest
from bokeh.models import HBar, HoverTool, Line

from airflowless import data
from airflowless.train import Result
from airflowless.tune import ResultGrid


def _history(losses: list[float]) -> list[dict[str, Any]]:
    return [{"loss": loss, "acc": 1 - loss / 10, "training_iteration": i} for i, loss in enumerate(losses, 1)]


def _grid(**kwargs: Any) -> ResultGrid:
    histories = {"trial_00000": [5.0, 4.0, 3.0], "trial_00001": [4.0, 2.0, 1.0], "trial_00002": [6.0, 5.5]}
    results = [Result(metrics=_history(h)[-1], checkpoint=None, path=f"/runs/exp/{name}",
                      metrics_history=_history(h), config={"x": i}) for i, (name, h) in enumerate(histories.items())]
    results.append(Result(metrics={}, checkpoint=None, path="/runs/exp/trial_00003", metrics_history=_history([7.0]),
                          error=RuntimeError("boom"), config={"x": 3}))
    return ResultGrid(results, path="/runs/exp", **kwargs)


def _lines(fig: Any) -> dict[str, Any]:
    return {r.name: r for r in fig.renderers if isinstance(r.glyph, Line)}


def test_a_grid_draws_one_line_per_trial_and_highlights_the_best() -> None:
    fig = _grid(metric="loss", mode="min").plot()
    lines = _lines(fig)
    assert sorted(lines) == ["trial_00000", "trial_00001", "trial_00002", "trial_00003"]
    assert lines["trial_00001"].data_source.data["y"] == [4.0, 2.0, 1.0]
    assert lines["trial_00001"].data_source.data["x"] == [1, 2, 3]
    widths = {name: r.glyph.line_width for name, r in lines.items()}
    assert widths["trial_00001"] > max(w for n, w in widths.items() if n != "trial_00001")
    assert [item.label["value"] for item in fig.legend[0].items] == ["best: trial_00001"]
    assert lines["trial_00003"].glyph.line_dash == [6] and lines["trial_00000"].glyph.line_dash == []  # failed
    assert fig.xaxis[0].axis_label == "training_iteration" and fig.yaxis[0].axis_label == "loss"
    assert any(isinstance(tool, HoverTool) for tool in fig.tools)


def test_another_metric_and_mode_pick_another_best() -> None:
    grid = _grid(metric="loss", mode="min")
    fig = grid.plot("acc", mode="min")
    assert fig.yaxis[0].axis_label == "acc"
    assert [item.label["value"] for item in fig.legend[0].items] == ["best: trial_00002"]
    plain = _grid(metric=None, mode=None).plot()  # no mode: nothing highlighted
    assert plain.yaxis[0].axis_label == "loss" and len(_lines(plain)) == 4  # the first numeric metric reported
    assert not any(legend.items for legend in plain.legend)
    assert len({r.glyph.line_width for r in _lines(plain).values()}) == 1


def test_bad_plot_requests_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="numeric metrics reported: .*'loss'"):
        _grid(metric="loss", mode="min").plot("nope")
    with pytest.raises(ValueError, match="'min' or 'max'"):
        _grid(metric="loss", mode="min").plot("loss", mode="lowest")
    with pytest.raises(ValueError, match="no report has a numeric metric"):
        Result(metrics={}, checkpoint=None).plot()


def test_a_result_draws_its_own_curve() -> None:
    result = Result(metrics={"loss": 1.0}, checkpoint=None, path="/runs/fit_1", metrics_history=_history([3.0, 1.0]))
    fig = result.plot()
    (line,) = _lines(fig).values()
    assert line.name == "fit_1" and line.data_source.data["y"] == [3.0, 1.0]
    assert result.plot("acc").yaxis[0].axis_label == "acc"


@pytest.mark.usefixtures("home")
def test_dataset_stats_chart_time_and_rows_per_operator(cluster_client: Any) -> None:
    ds = (data.range(2_000, parallelism=4).filter(expr=data.col("id") < 500).random_shuffle(seed=1)
          .map_batches(lambda b: b))
    assert len(ds.take_all()) == 500
    stats = ds.stats()
    assert stats.startswith("operator") and len(stats.operators) == 3  # read+filter, shuffle, map_batches
    layout = stats.plot()
    time_fig, rows_fig = layout.children
    names = [op.name for op in stats.operators]
    assert list(time_fig.y_range.factors) == list(reversed(names))
    (time_bars,) = [r for r in time_fig.renderers if isinstance(r.glyph, HBar)]
    (row_bars,) = [r for r in rows_fig.renderers if isinstance(r.glyph, HBar)]
    assert row_bars.data_source.data["rows"] == [op.rows or 0 for op in stats.operators]
    (mapped,) = [op for op in stats.operators if op.name.startswith("MapBatches")]
    assert mapped.rows == 500 and mapped.name in stats  # the chart and the printed table agree
    assert all(s >= 0 for s in time_bars.data_source.data["seconds"])
    assert time_fig.xaxis[0].axis_label == "seconds" and rows_fig.xaxis[0].axis_label == "rows"


def _ink(png: bytes) -> float:
    """The share of a PNG's pixels that are not white (a blank picture has none)."""
    import io

    from matplotlib.image import imread

    pixels = imread(io.BytesIO(png))
    return float((pixels[..., :3].min(axis=-1) < 0.95).mean())


def test_every_picture_has_a_still_png_for_saved_notebooks() -> None:
    from airflowless.plots import operator_chart
    from airflowless.plots.static import to_png

    for picture in (_grid(metric="loss", mode="min").plot(), operator_chart([("read", 0.5, 100), ("map", 0.2, 90)])):
        png = to_png(picture)
        assert png.startswith(b"\x89PNG") and _ink(png) > 0.01


def test_a_notebook_cell_showing_a_picture_keeps_it_interactive_and_still() -> None:
    from bokeh.plotting import figure
    from IPython.core.interactiveshell import InteractiveShell

    fig = _grid(metric="loss", mode="min").plot()
    shell = InteractiveShell.instance()
    try:
        from airflowless.plots.notebook import offer

        offer()
        shown, _ = shell.display_formatter.format(fig)
        assert shown["image/png"] and "data:image/png;base64," + shown["image/png"][:40] in shown["text/html"]
        assert "Bokeh" in shown["text/html"] and f"data-root-id=\"{fig.id}\"" in shown["text/html"]
        other, _ = shell.display_formatter.format(figure())  # a user's own Bokeh figure: displayed as before
        assert "image/png" not in other
    finally:
        InteractiveShell.clear_instance()
