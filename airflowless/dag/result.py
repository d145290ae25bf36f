"""The result of a pipeline run: its record, its outputs, and tables for people."""

from __future__ import annotations

import html
from typing import Any

from ..store.records import RunRecord, StageRecord, StageStatus
from .graph import map_refs
from .outputs import read_output

__all__ = ["RunResult", "stage_rows"]

_COLUMNS = ("stage", "status", "attempts", "duration", "worker", "output")


def _duration(record: StageRecord) -> str:
    return "" if record.duration_s is None else f"{record.duration_s:.2f}s"


def _in_order(stages: list[StageRecord]) -> list[StageRecord]:
    """``stages`` as recorded, with a mapped stage's items (``score[0]``...) right after the stage."""
    nodes = {s.node for s in stages}
    items: dict[str, list[StageRecord]] = {}
    for s in stages:
        parent, bracket, index = s.node.rpartition("[")
        if bracket and index.rstrip("]").isdigit() and parent in nodes:
            items.setdefault(parent, []).append(s)
    listed = {s.node for group in items.values() for s in group}
    ordered: list[StageRecord] = []
    for s in stages:
        if s.node not in listed:
            ordered += [s, *items.get(s.node, [])]
    return ordered


def stage_rows(run: RunRecord) -> list[tuple[str, ...]]:
    """One row per stage: the columns of :data:`_COLUMNS`, as text (a mapped stage's items after it)."""
    rows: list[tuple[str, ...]] = []
    for s in _in_order(run.stages):
        output = s.output_summary or ""
        if s.reused_from_run is not None:
            output = f"(from run {s.reused_from_run}) {output}"
        if s.error:
            output = s.error
        rows.append((s.node, s.status, str(s.attempts), _duration(s), s.worker or "", output))
    return rows


class RunResult:
    """What a pipeline call returns: the run's record and its outputs.

    ``result.value`` is what the pipeline function returned, with stage outputs
    filled in (``None`` for a skipped stage); ``result.output("fit")`` is one stage's output (read back from
    storage if the stage was cached).
    """

    def __init__(self, record: RunRecord, outputs: dict[str, Any], returned: Any) -> None:
        self.record = record
        self._outputs = dict(outputs)
        self._returned = returned

    @property
    def run_id(self) -> int:
        return self.record.id

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def params(self) -> dict[str, Any]:
        return self.record.params

    def output(self, node: str) -> Any:
        if node not in self._outputs:
            uri = self.record.stage(node).output_uri
            if uri is None:
                raise KeyError(f"stage {node!r} of run {self.run_id} has no output ({self.record.stage(node).status})")
            self._outputs[node] = read_output(uri)
        return self._outputs[node]

    @property
    def value(self) -> Any:
        return map_refs(self._returned, self._value_of) if self._returned is not None else None

    def _value_of(self, ref: Any) -> Any:
        """A returned stage's output; None for a stage that was skipped (it has none)."""
        if ref.node not in self._outputs and self.record.stage(ref.node).status == StageStatus.SKIPPED:
            return None
        return self.output(ref.node)

    @property
    def outputs(self) -> dict[str, Any]:
        return {s.node: self.output(s.node) for s in self.record.stages if s.output_uri}

    def __repr__(self) -> str:
        r = self.record
        took = f" in {r.duration_s:.2f}s" if r.duration_s is not None else ""
        lines = [f"run {r.id} of {r.pipeline!r}: {r.status}{took}"]
        for row in stage_rows(r):
            lines.append("  " + "  ".join(row).rstrip())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        r = self.record
        head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
            for row in stage_rows(r)
        )
        took = f" in {r.duration_s:.2f}s" if r.duration_s is not None else ""
        return (f"<p><b>run {r.id}</b> of <code>{html.escape(r.pipeline)}</code>: "
                f"<b>{html.escape(r.status)}</b>{took}</p>"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


