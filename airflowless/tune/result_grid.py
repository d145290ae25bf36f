"""ResultGrid: the trials of a finished experiment, as Results."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError
from ..train.result import Result

__all__ = ["ResultGrid"]


class ResultGrid:
    """One :class:`~airflowless.train.Result` per trial (``config`` holds the trial's config)."""

    def __init__(self, results: list[Result], *, metric: str | None, mode: str | None, path: str | None) -> None:
        self._results = results
        self._metric, self._mode = metric, mode
        self.experiment_path = path

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, index: int) -> Result:
        return self._results[index]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    @property
    def errors(self) -> list[BaseException]:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return sum(1 for r in self._results if r.error is None)

    def get_best_result(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                        filter_nan_and_inf: bool = True) -> Result:
        """The trial with the best ``metric`` (its last report, or its best with ``scope="all"``)."""
        metric, mode = metric or self._metric, mode or self._mode
        if metric is None or mode not in ("min", "max"):
            raise ConfigError("get_best_result needs metric and mode (here or in TuneConfig)")
        if scope not in ("last", "all"):
            raise ConfigError(f"scope must be 'last' or 'all', got {scope!r}")

        def value(result: Result) -> float | None:
            if scope == "all":
                values = [h[metric] for h in result.metrics_history if h.get(metric) is not None]
                if not values:
                    return None
                return min(values) if mode == "min" else max(values)
            v = (result.metrics or {}).get(metric)
            return None if v is None else float(v)

        scored: list[tuple[float, Result]] = []
        for r in self._results:
            v = value(r)
            if v is not None and v == v and not (filter_nan_and_inf and abs(v) == float("inf")):
                scored.append((v, r))
        if not scored:
            failed = self.errors
            why = (f"; {len(failed)} of {len(self)} trial(s) failed, the first with: "
                   f"{str(failed[0]).strip().splitlines()[0] if str(failed[0]).strip() else repr(failed[0])}"
                   if failed else "")
            raise ConfigError(f"no trial reported {metric!r}; the trials reported "
                             f"{sorted({k for r in self._results for k in (r.metrics or {})})}{why}")
        best = min(scored, key=lambda vr: vr[0]) if mode == "min" else max(scored, key=lambda vr: vr[0])
        return best[1]

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None) -> Any:
        """One row per trial: its config (``config/<name>``), its ``trial_id`` and the metrics of its last report.

        With ``filter_metric`` and ``filter_mode`` ("min"/"max"), each row holds
        the metrics of the trial's report that is best by that metric instead.

        >>> grid.get_dataframe(filter_metric="loss", filter_mode="min")  # doctest: +SKIP
        """
        import pandas as pd

        if (filter_metric is None) != (filter_mode is None):
            raise ConfigError("get_dataframe needs filter_metric and filter_mode together, "
                              "e.g. filter_metric='loss', filter_mode='min'")
        if filter_mode not in (None, "min", "max"):
            raise ConfigError(f"filter_mode must be 'min' or 'max', got {filter_mode!r}")
        rows = []
        for r in self._results:
            metrics = r.metrics or {}
            if filter_metric is not None:
                metrics = _best_report(r.metrics_history, filter_metric, filter_mode == "min") or metrics
            row = {**metrics, **{f"config/{k}": v for k, v in _flat(r.config).items()},
                   "trial_path": r.path, "error": None if r.error is None else str(r.error)}
            if "trial_id" not in row and r.path:  # a trial that never reported: named by its folder
                row["trial_id"] = r.path.rstrip("/").rsplit("/", 1)[-1]
            rows.append(row)
        return pd.DataFrame(rows)

    def plot(self, metric: str | None = None, mode: str | None = None) -> Any:
        """A Bokeh figure of ``metric`` over training iterations: one line per trial, the best highlighted.

        ``metric``/``mode`` default to TuneConfig's (the metric: else the first
        numeric one reported); without a mode no trial is highlighted. Failed
        trials are dashed; each line is named after its trial.

        >>> from bokeh.io import output_notebook, show             # doctest: +SKIP
        >>> output_notebook(); show(grid.plot("loss", mode="min"))  # doctest: +SKIP
        """
        from ..plots import first_metric, learning_curves

        if mode not in (None, "min", "max"):
            raise ConfigError(f"mode must be 'min' or 'max', got {mode!r}")
        metric = metric or self._metric or first_metric([r.metrics_history for r in self._results])
        mode = mode or (self._mode if metric == self._metric else None)
        labels = [_label(r, i) for i, r in enumerate(self._results)]
        best = None
        if mode is not None:
            with contextlib.suppress(ValueError):  # no trial ended with a finite value: none highlighted
                chosen = self.get_best_result(metric, mode)
                best = next(label for label, r in zip(labels, self._results, strict=True) if r is chosen)
        return learning_curves({label: r.metrics_history for label, r in zip(labels, self._results, strict=True)},
                               metric, best=best,
                               failed={label for label, r in zip(labels, self._results, strict=True)
                                       if r.error is not None},
                               title=f"{metric} ({mode}: best in red)" if best else metric)

    def __repr__(self) -> str:
        return (f"ResultGrid<{len(self)} trials, {self.num_terminated} completed, {self.num_errors} errored, "
                f"path={self.experiment_path!r}>")

    def _repr_html_(self) -> str:
        frame = self.get_dataframe()
        return f"<p>{html.escape(repr(self))}</p>" + frame.to_html(max_rows=50)


def _label(result: Result, index: int) -> str:
    """A trial's name: its folder's name (the trial id), else its position."""
    return result.path.rstrip("/").rsplit("/", 1)[-1] if result.path else f"trial {index}"


def _best_report(history: list[dict[str, Any]], metric: str, lowest: bool) -> dict[str, Any] | None:
    """The report with the best finite value of ``metric`` (the first of equals), or None."""
    scored = [(float(h[metric]), i) for i, h in enumerate(history)
              if isinstance(h.get(metric), (int, float)) and abs(float(h[metric])) != float("inf")
              and h[metric] == h[metric]]
    if not scored:
        return None
    _, index = min(scored) if lowest else min(scored, key=lambda vi: (-vi[0], vi[1]))
    return history[index]


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out
