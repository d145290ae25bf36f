"""Result: what ``Trainer.fit()`` returns (and what a Tune trial ends with)."""

from __future__ import annotations

import html
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

    @property
    def metrics_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.metrics_history)

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
