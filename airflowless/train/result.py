"""Result: what ``Trainer.fit()`` returns (and what a Tune trial ends with)."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from typing import Any

from .checkpoint import Checkpoint

__all__ = ["Result"]


@dataclass
class Result:
    """The last reported ``metrics``, the latest ``checkpoint``, the kept ``best_checkpoints``,
    every report in ``metrics_dataframe``, and ``error`` if the run failed."""

    metrics: dict[str, Any] | None
    checkpoint: Checkpoint | None
    error: BaseException | None = None
    path: str | None = None
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    metrics_history: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_path(cls, path: str) -> Result:
        """The Result of the Tune trial or Trainer fit whose folder is ``path`` (Ray's ``Result.from_path``), read
        back from the record: its config, every report, the latest and the kept checkpoints, and its error.

        A trial's folder is ``<experiment path>/<trial name>``; a fit's is its run's folder. The record is the one
        ``open_store()`` opens here (``AIRFLOWLESS_DB``); :class:`ConfigError` if it knows no run there.
        """
        from ..errors import ConfigError
        from ..store import open_store

        folder = str(path).rstrip("/")
        store = open_store()
        try:
            row = store.trial_in(folder)
            if row is None:
                raise ConfigError(f"no Tune trial or Trainer fit in the record at {store.url} ran in {folder!r}; "
                                  "give the folder of one (Result.path), with the record it was written to "
                                  "(AIRFLOWLESS_DB)")
            history = []
            for values in store.trial_metrics(row["id"]):  # each report, as {"step": n, **metrics}
                step = values.pop("step")
                history.append({**values, "training_iteration": values.get("training_iteration", step)})
            kept = [(Checkpoint(c["uri"]), c["metrics"] or {}) for c in store.trial_checkpoints(row["id"])]
        finally:
            store.close()
        latest = row["checkpoint_uri"] or (kept[-1][0].path if kept else None)
        return cls(metrics=row["last_metrics"] or (history[-1] if history else {}),
                   checkpoint=Checkpoint(latest) if latest else None,
                   error=RuntimeError(row["error"]) if row["status"] == "errored" else None,
                   path=folder, best_checkpoints=kept, metrics_history=history, config=row["config"] or {})

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint | None:
        """The kept checkpoint whose report scored best on ``metric`` (``mode`` "min" or "max"), as Ray's;
        None when no kept checkpoint reported ``metric``."""
        from ..errors import ConfigError

        if mode not in ("min", "max"):
            raise ConfigError(f"mode is 'min' or 'max', got {mode!r}")
        scored = [(metrics[metric], checkpoint) for checkpoint, metrics in self.best_checkpoints
                  if isinstance(metrics.get(metric), int | float) and not isinstance(metrics.get(metric), bool)]
        if not scored:
            return None
        pick = min if mode == "min" else max
        return pick(scored, key=lambda pair: pair[0])[1]

    @property
    def metrics_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.metrics_history)

    def plot(self, metric: str | None = None) -> Any:
        """A Bokeh figure of ``metric`` (default: the first numeric one reported) over training iterations.

        >>> from bokeh.io import output_notebook, show             # doctest: +SKIP
        >>> output_notebook(); show(result.plot("loss"))            # doctest: +SKIP
        """
        from ..plots import first_metric, learning_curves

        label = os.path.basename(self.path.rstrip("/")) if self.path else "run"
        metric = metric or first_metric([self.metrics_history])
        return learning_curves({label: self.metrics_history}, metric,
                               failed={label} if self.error is not None else ())

    def __repr__(self) -> str:
        shown = {k: v for k, v in (self.metrics or {}).items() if not k.startswith("_")}
        parts = [f"metrics={shown}", f"checkpoint={self.checkpoint!r}", f"path={self.path!r}"]
        if self.error is not None:
            parts.append(f"error={type(self.error).__name__}: {self.error}")
        return "Result(" + ", ".join(parts) + ")"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(repr(v))}</td></tr>"
                       for k, v in (self.metrics or {}).items())
        error = f"<p style='color:#b00'>error: {html.escape(str(self.error))}</p>" if self.error else ""
        return (f"<b>Result</b> {html.escape(str(self.path or ''))}{error}"
                f"<table><tr><th>metric</th><th>value</th></tr>{rows}</table>"
                f"<p>checkpoint: {html.escape(repr(self.checkpoint))}</p>")
